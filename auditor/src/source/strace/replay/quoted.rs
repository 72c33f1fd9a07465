//! Places in the logs that could not be used, of one kind: all counted, the first few kept
//! (in reading order, across the parts of a file read at once) to quote in a note.

/// At most this many places are quoted in a note (all are counted).
const QUOTED: usize = 10;

/// Places in the logs (file:line, why) of one kind: all counted, the first few kept to
/// quote in a note.
#[derive(Default)]
pub struct Quoted {
    pub count: u64,
    first: Vec<(String, u64, String)>,
}

impl Quoted {
    pub fn add(&mut self, file: &str, line: u64, why: String) {
        self.count += 1;
        self.keep(file, line, why);
    }

    /// Keeps a place among the first, in reading order: parts of a file report theirs out
    /// of order, and the earliest are quoted.
    fn keep(&mut self, file: &str, line: u64, why: String) {
        let at = self
            .first
            .iter()
            .rposition(|(kept, kept_line, _)| kept != file || *kept_line <= line)
            .map_or(0, |index| index + 1);
        if at < QUOTED {
            self.first.insert(at, (file.to_string(), line, why));
            self.first.truncate(QUOTED);
        }
    }

    /// Adds a part's places; its lines start `offset` lines into the file.
    pub fn merge(&mut self, other: Quoted, offset: u64) {
        self.count += other.count;
        for (file, line, why) in other.first {
            self.keep(&file, offset + line, why);
        }
    }

    /// The first place kept (file, line, why).
    pub fn first(&self) -> Option<(&str, u64, &str)> {
        self.first
            .first()
            .map(|(file, line, why)| (file.as_str(), *line, why.as_str()))
    }

    /// "1 line is ...: f:3: why" or "N lines are ...: f:3: why; f:9: why; ...".
    pub fn note(&self, one: &str, many: &str) -> String {
        let places: Vec<String> = self
            .first
            .iter()
            .map(|(file, line, why)| format!("{file}:{line}: {why}"))
            .collect();
        let more = if self.count > self.first.len() as u64 {
            "; ..."
        } else {
            ""
        };
        let what = crate::observation::counted(self.count, one, many);
        format!("{what}: {}{more}", places.join("; "))
    }
}
