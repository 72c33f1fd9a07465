//! The picture (`--svg FILE`), one page for a thread: per site (and per group, with
//! `--group-by`) the share against the hint with its 95% interval on a log axis, coloured
//! by verdict (a legend says which colour is which), each row labelled with its
//! evaluations and verdict, the 10% bar a hint must stay under and the 50% line past which
//! it is wrong marked, a share of 0 on a tick of its own left of the axis; sorted as the
//! annotated view, and titled with what was traced on which kernels. Past [`MAX_ROWS`]
//! rows the rest are named as left out, not drawn. Drawn with plotters; its labels are
//! laid out with a TrueType font of the system's.

use std::sync::OnceLock;

use super::escape::escape_text;

use plotters::{
    coord::{Shift, ranged1d::SegmentValue},
    prelude::*,
};

use super::{Report, SiteReport, Sort};
use crate::verdict::{self, VerdictKind};

/// Where Debian and most distributions keep a sans-serif TrueType font.
const FONTS: [&str; 3] = [
    "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf",
    "/usr/share/fonts/dejavu/DejaVuSans.ttf",
    "/usr/share/fonts/TTF/DejaVuSans.ttf",
];

/// The smallest share the axis shows (0.01%); a share of 0 is drawn on its own tick,
/// [`ZERO_AT`], left of it.
const AXIS_FLOOR: f64 = 1e-4;
const ZERO_AT: f64 = 1e-5;

/// The rows one page holds (at 22 px a row: under 1500 px with the title and legend).
pub const MAX_ROWS: usize = 60;

#[derive(Debug, thiserror::Error)]
pub enum SvgError {
    #[error(
        "drawing the SVG needs a TrueType font to lay out its labels, and none of {} exists \
         (Debian: apt-get install fonts-dejavu-core)",
        FONTS.join(", ")
    )]
    NoFont,
    #[error("drawing the SVG: {0}")]
    Draw(String),
}

/// Registers the first font of [`FONTS`] once.
fn font() -> Result<(), SvgError> {
    static REGISTERED: OnceLock<bool> = OnceLock::new();
    let registered = REGISTERED.get_or_init(|| {
        FONTS
            .iter()
            .find_map(|path| std::fs::read(path).ok())
            .is_some_and(|bytes| {
                // plotters keeps the font for the life of the process.
                let bytes: &'static [u8] = Box::leak(bytes.into_boxed_slice());
                plotters::style::register_font("sans-serif", FontStyle::Normal, bytes).is_ok()
            })
    });
    if *registered {
        Ok(())
    } else {
        Err(SvgError::NoFont)
    }
}

/// One row of the picture: a label, the share against the hint, its interval and verdict.
struct Row {
    label: String,
    share: f64,
    low: f64,
    high: f64,
    kind: VerdictKind,
}

/// The verdicts' colours, as the legend lists them.
const COLOURS: [(VerdictKind, RGBColor); 7] = [
    (VerdictKind::Holds, RGBColor(0x1b, 0x9e, 0x4b)),
    (VerdictKind::Candidate, RGBColor(0x1f, 0x6f, 0xc8)),
    (VerdictKind::Unclear, RGBColor(0x80, 0x80, 0x80)),
    (VerdictKind::Costly, RGBColor(0xe0, 0x8a, 0x00)),
    (VerdictKind::NoHint, RGBColor(0x8e, 0x44, 0xad)),
    (VerdictKind::Wrong, RGBColor(0xc8, 0x1e, 0x1e)),
    (VerdictKind::NoData, RGBColor(0xb0, 0xb0, 0xb0)),
];

fn colour(kind: VerdictKind) -> RGBColor {
    COLOURS
        .iter()
        .find(|(k, _)| *k == kind)
        .map_or(BLACK, |(_, colour)| *colour)
}

/// Every row, in `order`: each site's, then its groups'.
fn rows(report: &Report, order: Sort) -> Vec<Row> {
    let mut rows = Vec::new();
    let mut sites: Vec<&SiteReport> = report
        .sites
        .iter()
        .filter(|s| s.measured && s.counts.total() > 0)
        .collect();
    sites.sort_by(|a, b| order.compare(a, b));
    for site in sites {
        let row = |name: String, counts: &auditor_common::Counts, v: &verdict::Verdict| Row {
            label: format!("{name}  n {}  {}", counts.total(), v.label()),
            share: site.rare_arm.of(counts) as f64 / counts.total() as f64,
            low: v.mispredicted_low,
            high: v.mispredicted_high,
            kind: v.kind,
        };
        rows.push(row(site.info.id.to_string(), &site.counts, &site.verdict));
        for group in &report.groups {
            if let Some(p) = group.sites.iter().find(|p| p.id == site.info.id) {
                // Names from traced programs: their control characters are not even
                // valid in XML, so they are shown as escapes.
                let name = format!("· {}", escape_text(&group.name));
                rows.push(row(name, &p.counts, &p.verdict));
            }
        }
    }
    rows
}

/// What was traced, on which kernels, by which source: the picture's title.
fn title(report: &Report) -> String {
    let mut kernels: Vec<&str> = report
        .runs
        .iter()
        .map(|r| r.kernel_release.as_str())
        .collect();
    kernels.dedup();
    format!(
        "{} on Linux {} ({})",
        escape_text(&report.target),
        kernels.join(", "),
        report.source
    )
}

/// Where a share is drawn: a share of 0 on its own tick.
fn at_share(share: f64) -> f64 {
    if share <= 0.0 {
        ZERO_AT
    } else {
        share.max(AXIS_FLOOR)
    }
}

fn draw(
    area: &DrawingArea<SVGBackend<'_>, Shift>,
    title: &str,
    rows: &[Row],
    left_out: usize,
) -> Result<(), String> {
    let error = |e: &dyn std::fmt::Display| e.to_string();
    area.fill(&WHITE).map_err(|e| error(&e))?;
    let (top, area) = area.split_vertically(58);
    top.draw(&Text::new(
        title.chars().take(150).collect::<String>(),
        (12, 8),
        ("sans-serif", 15).into_font(),
    ))
    .map_err(|e| error(&e))?;
    // The legend: one swatch and name per verdict.
    let mut x = 12;
    for (kind, colour) in COLOURS {
        top.draw(&Rectangle::new([(x, 34), (x + 12, 46)], colour.filled()))
            .map_err(|e| error(&e))?;
        top.draw(&Text::new(
            kind.name(),
            (x + 16, 34),
            ("sans-serif", 12).into_font(),
        ))
        .map_err(|e| error(&e))?;
        x += 24 + 8 * kind.name().len() as i32;
    }
    let count = rows.len().max(1) as i32;
    let labels: Vec<&str> = rows.iter().map(|r| r.label.as_str()).collect();
    let mut chart = ChartBuilder::on(&area)
        .margin(12)
        .x_label_area_size(if left_out > 0 { 56 } else { 36 })
        .y_label_area_size(330)
        .build_cartesian_2d(
            (ZERO_AT * 0.5..1.0).log_scale(),
            (0..count - 1).into_segmented(),
        )
        .map_err(|e| error(&e))?;
    chart
        .configure_mesh()
        .disable_y_mesh()
        .y_labels(rows.len())
        .y_label_formatter(&|value| match value {
            SegmentValue::CenterOf(index) | SegmentValue::Exact(index) => labels
                .get(labels.len().wrapping_sub(1).wrapping_sub(*index as usize))
                .map_or_else(String::new, |label| label.to_string()),
            SegmentValue::Last => String::new(),
        })
        .x_desc(if left_out > 0 {
            format!(
                "share against the hint (unhinted: the minority), log scale; red: the 10% bar \
                 (GCC's builtin-expect-probability), dark red: 50% (wrong). {left_out} more \
                 rows not drawn: narrow with --site, --top or --min-evaluations"
            )
        } else {
            "share against the hint (unhinted: the minority), log scale; red: the 10% bar \
             (GCC's builtin-expect-probability), dark red: 50% (wrong)"
                .to_string()
        })
        .x_label_formatter(&|share| {
            if *share <= ZERO_AT * 1.5 {
                "0".to_string()
            } else {
                format!("{}%", share * 100.0)
            }
        })
        .draw()
        .map_err(|e| error(&e))?;
    // Rows top to bottom in report order.
    let at = |index: usize| SegmentValue::CenterOf(count - 1 - index as i32);
    let line = |share: f64, style: ShapeStyle| {
        PathElement::new(
            vec![(share, SegmentValue::Exact(0)), (share, SegmentValue::Last)],
            style,
        )
    };
    let break_at = (ZERO_AT * AXIS_FLOOR).sqrt();
    chart
        .draw_series([
            line(verdict::HOLDS_BELOW, RED.stroke_width(2)),
            line(0.5, RGBColor(0x80, 0, 0).stroke_width(2)),
            // The zero tick stands apart from the axis's shares.
            line(break_at, BLACK.mix(0.3).stroke_width(1)),
        ])
        .map_err(|e| error(&e))?;
    // An interval from 0 has no end on a log axis: its upper bound, the one that decides,
    // is a bar, reached by a faint line from the axis; others are drawn whole.
    chart
        .draw_series(rows.iter().enumerate().map(|(index, row)| {
            let (from, style) = if row.low > 0.0 {
                (row.low.max(AXIS_FLOOR), colour(row.kind).stroke_width(2))
            } else {
                (AXIS_FLOOR, colour(row.kind).mix(0.35).stroke_width(1))
            };
            PathElement::new(
                vec![(from, at(index)), (row.high.max(AXIS_FLOOR), at(index))],
                style,
            )
        }))
        .map_err(|e| error(&e))?;
    chart
        .draw_series(
            rows.iter()
                .enumerate()
                .filter(|(_, row)| row.low <= 0.0)
                .map(|(index, row)| {
                    let high = row.high.max(AXIS_FLOOR);
                    let y = count - 1 - index as i32;
                    PathElement::new(
                        vec![
                            (high, SegmentValue::Exact(y)),
                            (high, SegmentValue::Exact(y + 1)),
                        ],
                        colour(row.kind).stroke_width(2),
                    )
                }),
        )
        .map_err(|e| error(&e))?;
    chart
        .draw_series(rows.iter().enumerate().map(|(index, row)| {
            Circle::new(
                (at_share(row.share), at(index)),
                4,
                colour(row.kind).filled(),
            )
        }))
        .map_err(|e| error(&e))?;
    area.present().map_err(|e| error(&e))
}

/// Whether an SVG can be drawn here (its labels need a font), asked before a session.
pub fn can_draw() -> Result<(), SvgError> {
    font()
}

/// `report` drawn as an SVG document, its sites in `order`, at most [`MAX_ROWS`] rows.
pub fn render(report: &Report, order: Sort) -> Result<String, SvgError> {
    render_rows(report, order, MAX_ROWS)
}

/// [`render`] with at most `max_rows` rows.
pub(super) fn render_rows(
    report: &Report,
    order: Sort,
    max_rows: usize,
) -> Result<String, SvgError> {
    font()?;
    let mut rows = rows(report, order);
    let left_out = rows.len().saturating_sub(max_rows);
    rows.truncate(max_rows);
    let height = 160 + 22 * rows.len() as u32;
    let mut text = String::new();
    {
        let area = SVGBackend::with_string(&mut text, (1100, height)).into_drawing_area();
        draw(&area, &title(report), &rows, left_out).map_err(SvgError::Draw)?;
    }
    Ok(text)
}
