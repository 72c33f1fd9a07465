//! The picture (`--svg FILE`): per site (and per group, with `--group-by`) the share of the
//! rare arm with its 95% interval on a log axis, the 10% bar a hint must stay under marked;
//! one row per site, one mark per row. Drawn with plotters; its labels are laid out with a
//! TrueType font of the system's.

use std::sync::OnceLock;

use super::escape::escape_text;

use plotters::{
    coord::{Shift, ranged1d::SegmentValue},
    prelude::*,
};

use super::{Report, SiteReport, Sort};
use crate::verdict;

/// Where Debian and most distributions keep a sans-serif TrueType font.
const FONTS: [&str; 3] = [
    "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf",
    "/usr/share/fonts/dejavu/DejaVuSans.ttf",
    "/usr/share/fonts/TTF/DejaVuSans.ttf",
];

/// The smallest share the axis shows; a share of 0 is drawn there.
const AXIS_FLOOR: f64 = 1e-6;

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

/// One row of the picture: a label, the share of the rare arm and its interval.
struct Row {
    label: String,
    share: f64,
    low: f64,
    high: f64,
}

fn rows(report: &Report, order: Sort) -> Vec<Row> {
    let mut rows = Vec::new();
    let mut sites: Vec<&SiteReport> = report
        .sites
        .iter()
        .filter(|s| s.measured && s.counts.total() > 0)
        .collect();
    sites.sort_by(|a, b| order.compare(a, b));
    for site in sites {
        let row = |label: String, counts: &auditor_common::Counts, v: &verdict::Verdict| Row {
            label,
            share: site.rare_arm.of(counts) as f64 / counts.total() as f64,
            low: v.mispredicted_low,
            high: v.mispredicted_high,
        };
        rows.push(row(site.info.id.to_string(), &site.counts, &site.verdict));
        for group in &report.groups {
            if let Some(p) = group.sites.iter().find(|p| p.id == site.info.id) {
                // Names from traced programs: their control characters are not even
                // valid in XML, so they are shown as escapes.
                let label = format!("· {}", escape_text(&group.name));
                rows.push(row(label, &p.counts, &p.verdict));
            }
        }
    }
    rows
}

fn draw(area: &DrawingArea<SVGBackend<'_>, Shift>, rows: &[Row]) -> Result<(), String> {
    let error = |e: &dyn std::fmt::Display| e.to_string();
    area.fill(&WHITE).map_err(|e| error(&e))?;
    let count = rows.len().max(1) as i32;
    let labels: Vec<&str> = rows.iter().map(|r| r.label.as_str()).collect();
    let mut chart = ChartBuilder::on(area)
        .caption(
            "share of the rare arm, with its 95% interval",
            ("sans-serif", 16),
        )
        .margin(12)
        .x_label_area_size(36)
        .y_label_area_size(200)
        .build_cartesian_2d((AXIS_FLOOR..1.0).log_scale(), (0..count).into_segmented())
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
        .x_desc(
            "share against the hint (unhinted: the minority), log scale; red: the 10% bar \
             (GCC's builtin-expect-probability)",
        )
        .x_label_formatter(&|share| format!("{}%", share * 100.0))
        .draw()
        .map_err(|e| error(&e))?;
    // Rows top to bottom in report order.
    let at = |index: usize| SegmentValue::CenterOf(count - 1 - index as i32);
    let bar = verdict::HOLDS_BELOW;
    chart
        .draw_series(std::iter::once(PathElement::new(
            vec![(bar, SegmentValue::Exact(0)), (bar, SegmentValue::Last)],
            RED.stroke_width(2),
        )))
        .map_err(|e| error(&e))?;
    let floor = |share: f64| share.max(AXIS_FLOOR);
    chart
        .draw_series(rows.iter().enumerate().map(|(index, row)| {
            PathElement::new(
                vec![(floor(row.low), at(index)), (floor(row.high), at(index))],
                BLUE.stroke_width(2),
            )
        }))
        .map_err(|e| error(&e))?;
    chart
        .draw_series(
            rows.iter()
                .enumerate()
                .map(|(index, row)| Circle::new((floor(row.share), at(index)), 4, BLUE.filled())),
        )
        .map_err(|e| error(&e))?;
    area.present().map_err(|e| error(&e))
}

/// Whether an SVG can be drawn here (its labels need a font), asked before a session.
pub fn can_draw() -> Result<(), SvgError> {
    font()
}

/// `report` drawn as an SVG document, its sites in `order`.
pub fn render(report: &Report, order: Sort) -> Result<String, SvgError> {
    font()?;
    let rows = rows(report, order);
    let height = 120 + 22 * rows.len() as u32;
    let mut text = String::new();
    {
        let area = SVGBackend::with_string(&mut text, (960, height)).into_drawing_area();
        draw(&area, &rows).map_err(SvgError::Draw)?;
    }
    Ok(text)
}
