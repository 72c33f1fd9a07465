//! The crates' modules in layers: which module of a crate names which (through `use` or a
//! `crate::`/`super::` path, tests left out), and the circles in that graph, at module and
//! at top-level granularity. A test keeps every crate of the workspace without circles: a
//! module never imports one that imports it back.

use std::{
    collections::{BTreeMap, BTreeSet},
    path::Path,
};

/// A crate's modules (`a::b`; the crate root is `""`) and the modules each one names.
pub type Graph = BTreeMap<String, BTreeSet<String>>;

/// The module of each `.rs` file under `src`, and its text.
fn modules(src: &Path) -> BTreeMap<String, String> {
    let mut found = BTreeMap::new();
    let mut dirs = vec![src.to_path_buf()];
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(&dir).expect("a source directory") {
            let path = entry.expect("an entry").path();
            if path.is_dir() {
                dirs.push(path);
                continue;
            }
            if path.extension().is_none_or(|ext| ext != "rs") {
                continue;
            }
            let relative = path.strip_prefix(src).unwrap().with_extension("");
            let mut parts: Vec<String> = relative
                .components()
                .map(|c| c.as_os_str().to_string_lossy().into_owned())
                .collect();
            if matches!(
                parts.last().map(String::as_str),
                Some("mod" | "lib" | "main")
            ) {
                parts.pop();
            }
            let text = std::fs::read_to_string(&path).unwrap();
            found.insert(parts.join("::"), text);
        }
    }
    found
}

/// `text` without comments and without its tests (`#[cfg(test)] mod tests` to the end).
fn code(text: &str) -> String {
    let text = match text.find("#[cfg(test)]\nmod tests") {
        Some(tests) => &text[..tests],
        None => text,
    };
    text.lines()
        .map(|line| match line.find("//") {
            Some(comment) => &line[..comment],
            None => line,
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// The paths a use tree names: `a::{b::C, d}` is `a::b::C` and `a::d`.
fn expand(tree: &str) -> Vec<String> {
    let Some(open) = tree.find('{') else {
        return vec![tree.to_string()];
    };
    let (prefix, inner) = (&tree[..open], &tree[open + 1..tree.len() - 1]);
    let mut parts = Vec::new();
    let (mut depth, mut start) = (0, 0);
    for (index, c) in inner.char_indices() {
        match c {
            '{' => depth += 1,
            '}' => depth -= 1,
            ',' if depth == 0 => {
                parts.push(&inner[start..index]);
                start = index + 1;
            }
            _ => {}
        }
    }
    parts.push(&inner[start..]);
    parts
        .into_iter()
        .filter(|part| !part.is_empty())
        .flat_map(|part| expand(part).into_iter().map(|p| format!("{prefix}{p}")))
        .collect()
}

/// The paths starting with `crate::` or `super::` in `code`: its use trees, expanded, and
/// the paths written inline.
fn paths(code: &str) -> Vec<String> {
    let mut found = Vec::new();
    let mut rest = code;
    while let Some(at) = rest.find("use ") {
        let before = rest[..at].chars().last();
        rest = &rest[at + 4..];
        if before.is_some_and(|c| c.is_alphanumeric() || c == '_') {
            continue;
        }
        let Some(end) = rest.find(';') else { break };
        let tree: String = rest[..end].chars().filter(|c| !c.is_whitespace()).collect();
        found.extend(expand(&tree));
    }
    for start in ["crate::", "super::"] {
        let mut rest = code;
        while let Some(at) = rest.find(start) {
            let path: String = rest[at..]
                .chars()
                .take_while(|c| c.is_alphanumeric() || *c == '_' || *c == ':')
                .collect();
            found.push(path.trim_end_matches(':').to_string());
            rest = &rest[at + start.len()..];
        }
    }
    found
}

/// The graph of the crate whose sources are under `src`: an edge from each module to each
/// module it names, but for its own ancestors (a child may use its parent's items).
pub fn graph(src: &Path) -> Graph {
    let modules = modules(src);
    let mut graph = Graph::new();
    for (module, text) in &modules {
        let mut names = BTreeSet::new();
        for path in paths(&code(text)) {
            let mut segments: Vec<&str> = path.split("::").collect();
            let mut base: Vec<&str> = if module.is_empty() {
                Vec::new()
            } else {
                module.split("::").collect()
            };
            match segments.first() {
                Some(&"crate") => {
                    base.clear();
                    segments.remove(0);
                }
                Some(&"super") => {
                    while segments.first() == Some(&"super") {
                        base.pop();
                        segments.remove(0);
                    }
                }
                _ => continue,
            }
            // The longest prefix that is a module.
            let named = (1..=segments.len()).rev().find_map(|k| {
                let candidate = [&base[..], &segments[..k]].concat().join("::");
                modules.contains_key(&candidate).then_some(candidate)
            });
            if let Some(named) = named
                && !named.is_empty()
                && named != *module
                && !module.starts_with(&format!("{named}::"))
            {
                names.insert(named);
            }
        }
        graph.insert(module.clone(), names);
    }
    graph
}

/// `graph` with each module taken as its top-level module.
pub fn top_level(graph: &Graph) -> Graph {
    let top = |module: &str| module.split("::").next().unwrap_or_default().to_string();
    let mut collapsed = Graph::new();
    for (module, names) in graph {
        let entry = collapsed.entry(top(module)).or_default();
        for name in names {
            if top(name) != top(module) {
                entry.insert(top(name));
            }
        }
    }
    collapsed
}

/// The circles of `graph`: its strongly connected components of more than one module.
pub fn circles(graph: &Graph) -> Vec<Vec<String>> {
    // Tarjan's algorithm, iterative over an index of the modules.
    let names: Vec<&String> = graph.keys().collect();
    let index_of: BTreeMap<&String, usize> =
        names.iter().enumerate().map(|(i, n)| (*n, i)).collect();
    let edges: Vec<Vec<usize>> = names
        .iter()
        .map(|n| {
            graph[*n]
                .iter()
                .filter_map(|m| index_of.get(m).copied())
                .collect()
        })
        .collect();
    let count = names.len();
    let (mut index, mut low, mut on_stack) =
        (vec![None; count], vec![0; count], vec![false; count]);
    let (mut stack, mut next, mut found) = (Vec::new(), 0, Vec::new());
    for root in 0..count {
        if index[root].is_some() {
            continue;
        }
        // (node, next edge to look at)
        let mut work = vec![(root, 0)];
        while let Some(&(node, edge)) = work.last() {
            if edge == 0 && index[node].is_none() {
                index[node] = Some(next);
                low[node] = next;
                next += 1;
                stack.push(node);
                on_stack[node] = true;
            }
            if let Some(&to) = edges[node].get(edge) {
                if let Some(top) = work.last_mut() {
                    top.1 += 1;
                }
                match index[to] {
                    None => work.push((to, 0)),
                    Some(to_index) if on_stack[to] => low[node] = low[node].min(to_index),
                    Some(_) => {}
                }
                continue;
            }
            work.pop();
            if let Some(&(parent, _)) = work.last() {
                low[parent] = low[parent].min(low[node]);
            }
            if Some(low[node]) == index[node] {
                let mut component = Vec::new();
                while let Some(member) = stack.pop() {
                    on_stack[member] = false;
                    component.push(names[member].clone());
                    if member == node {
                        break;
                    }
                }
                if component.len() > 1 {
                    component.sort();
                    found.push(component);
                }
            }
        }
    }
    found
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn circles_are_found_and_a_parent_is_not_one() {
        let graph: Graph = [
            ("a", vec!["b"]),
            ("b", vec!["c"]),
            ("c", vec!["a"]),
            ("d", vec!["a"]),
            ("d::e", vec![]),
        ]
        .into_iter()
        .map(|(m, n)| (m.to_string(), n.into_iter().map(String::from).collect()))
        .collect();
        assert_eq!(circles(&graph), [vec!["a", "b", "c"]]);
        assert_eq!(
            expand("crate::{a::{B,c},d}"),
            ["crate::a::B", "crate::a::c", "crate::d"]
        );
    }

    /// No crate of the workspace has a module that imports one that imports it back, at
    /// module or at top-level granularity.
    #[test]
    fn no_module_imports_one_that_imports_it_back() {
        let root = crate::workspace_root();
        for krate in ["auditor-common", "auditor-ebpf", "auditor", "xtask"] {
            let graph = graph(&root.join(krate).join("src"));
            assert!(graph.len() > 10, "{krate}: {} modules", graph.len());
            for (granularity, graph) in
                [("module", graph.clone()), ("top-level", top_level(&graph))]
            {
                let found = circles(&graph);
                assert!(
                    found.is_empty(),
                    "{krate} has import circles at {granularity} granularity: {found:?}\n{}",
                    found
                        .iter()
                        .flatten()
                        .map(|m| format!("  {m} -> {:?}", graph[m]))
                        .collect::<Vec<_>>()
                        .join("\n")
                );
            }
        }
    }
}
