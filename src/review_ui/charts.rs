//! Bar charts drawn on the server as SVG (no script, no image requests): bars per interval,
//! grouped when there are several series, with a value axis, time labels, a legend, an
//! accessible title and description, and a tooltip (`<title>`) on every bar.

use std::fmt::Write as _;

/// One series of bars: its name, its legend (the name and, say, its total), colour and one
/// value per interval.
pub(super) struct Series {
    pub(super) name: &'static str,
    pub(super) legend: String,
    pub(super) color: &'static str,
    pub(super) values: Vec<u64>,
}

/// A chart: its id (for the accessible labels), height (in the 1200-wide drawing), title,
/// description, the intervals' labels (`09:00`, one per interval) and the series.
pub(super) struct Chart<'a> {
    pub(super) id: &'a str,
    pub(super) height: f64,
    pub(super) title: &'a str,
    pub(super) description: &'a str,
    pub(super) labels: &'a [String],
    pub(super) series: &'a [Series],
}

const WIDTH: f64 = 1200.0;
const LEFT: f64 = 46.0;
const RIGHT: f64 = 12.0;
const TOP: f64 = 40.0;
const BOTTOM: f64 = 30.0;
const INK: &str = "#1d2330";
const MUTED: &str = "#5b6475";
const GRID: &str = "#dde1e8";
const FONT: &str = "system-ui,-apple-system,'Segoe UI',Roboto,'DejaVu Sans',sans-serif";

/// The top of the value axis and its step: a step of 1, 2 or 5 times a power of ten, at most
/// five steps up to a top at or above `max` (a chart of zeros still has an axis up to 1).
pub(super) fn axis(max: u64) -> (u64, u64) {
    let max = max.max(1);
    let mut magnitude = 1_u64;
    loop {
        for m in [1, 2, 5] {
            let step = m * magnitude;
            if max.div_ceil(step) <= 5 {
                return (max.div_ceil(step) * step, step);
            }
        }
        magnitude = magnitude.saturating_mul(10);
    }
}

fn escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

/// The chart as an inline `<svg>` element, as wide as the page.
pub(super) fn bars(chart: &Chart<'_>) -> String {
    let n = chart.labels.len().max(1);
    let k = chart.series.len().max(1);
    let max = chart
        .series
        .iter()
        .flat_map(|s| s.values.iter().copied())
        .max()
        .unwrap_or(0);
    let (top, step) = axis(max);
    let plot_w = WIDTH - LEFT - RIGHT;
    let height = chart.height.max(TOP + BOTTOM + 40.0);
    let plot_h = height - TOP - BOTTOM;
    let slot = plot_w / n as f64;
    let bar_w = (slot * 0.78 / k as f64).max(1.0);
    let y = |v: u64| TOP + plot_h - plot_h * v as f64 / top as f64;
    let id = escape(chart.id);
    let mut svg = String::with_capacity(8192);
    let _ = write!(
        svg,
        "<svg class=\"chart\" id=\"{id}\" role=\"img\" aria-labelledby=\"{id}-title {id}-desc\" \
         viewBox=\"0 0 {WIDTH} {height}\" width=\"100%\" preserveAspectRatio=\"xMidYMid meet\" \
         font-family=\"{FONT}\" font-size=\"12\" xmlns=\"http://www.w3.org/2000/svg\">\
         <title id=\"{id}-title\">{}</title><desc id=\"{id}-desc\">{}</desc>",
        escape(chart.title),
        escape(chart.description),
    );
    // Legend, top left: a swatch and the series' name with its total.
    let mut x = LEFT;
    for s in chart.series {
        let label = &s.legend;
        let _ = write!(
            svg,
            "<g class=\"legend\"><rect x=\"{x:.1}\" y=\"12\" width=\"12\" height=\"12\" rx=\"2\" \
             fill=\"{}\"/><text x=\"{:.1}\" y=\"22.5\" fill=\"{INK}\" font-size=\"13\">{}</text></g>",
            s.color,
            x + 17.0,
            escape(label),
        );
        x += 17.0 + 7.5 * label.chars().count() as f64 + 22.0;
    }
    // Value axis: grid lines and their values.
    let mut v = 0;
    while v <= top {
        let yy = y(v);
        let _ = write!(
            svg,
            "<line x1=\"{LEFT}\" x2=\"{:.1}\" y1=\"{yy:.1}\" y2=\"{yy:.1}\" stroke=\"{}\" \
             stroke-width=\"1\"/><text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"end\" fill=\"{MUTED}\">{v}</text>",
            WIDTH - RIGHT,
            if v == 0 { MUTED } else { GRID },
            LEFT - 6.0,
            yy + 4.0,
        );
        v += step;
    }
    // Interval labels: every one if they fit, else every second, third or sixth.
    let every = [1_usize, 2, 3, 4, 6, 12]
        .into_iter()
        .find(|e| slot * *e as f64 >= 44.0)
        .unwrap_or(n);
    for (i, label) in chart.labels.iter().enumerate() {
        if i % every == 0 {
            let _ = write!(
                svg,
                "<text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"middle\" fill=\"{MUTED}\">{}</text>",
                LEFT + slot * (i as f64 + 0.5),
                height - BOTTOM + 17.0,
                escape(label),
            );
        }
    }
    // The bars, with their value above them when it fits.
    let group_w = bar_w * k as f64;
    for (i, label) in chart.labels.iter().enumerate() {
        let x0 = LEFT + slot * i as f64 + (slot - group_w) / 2.0;
        for (j, s) in chart.series.iter().enumerate() {
            let value = s.values.get(i).copied().unwrap_or(0);
            let (bx, by) = (x0 + bar_w * j as f64, y(value));
            let h = (TOP + plot_h - by).max(0.0);
            let _ = write!(
                svg,
                "<rect class=\"bar\" data-series=\"{}\" data-interval=\"{}\" data-value=\"{value}\" \
                 x=\"{bx:.1}\" y=\"{by:.1}\" width=\"{:.1}\" height=\"{h:.1}\" fill=\"{}\">\
                 <title>{}: {value} {}</title></rect>",
                escape(s.name),
                escape(label),
                (bar_w - 1.0).max(1.0),
                s.color,
                escape(label),
                escape(&s.name.to_lowercase()),
            );
            let digits = value.to_string().len() as f64;
            if value > 0 && bar_w >= 6.5 * digits {
                let _ = write!(
                    svg,
                    "<text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"middle\" font-size=\"11\" \
                     fill=\"{INK}\">{value}</text>",
                    bx + (bar_w - 1.0) / 2.0,
                    by - 3.0,
                );
            }
        }
    }
    svg.push_str("</svg>");
    svg
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_axis_steps_are_round_and_cover_the_largest_value() {
        assert_eq!(axis(0), (1, 1));
        assert_eq!(axis(3), (3, 1));
        assert_eq!(axis(7), (8, 2));
        assert_eq!(axis(12), (15, 5));
        assert_eq!(axis(48), (50, 10));
        assert_eq!(axis(1234), (1500, 500));
    }

    #[test]
    fn every_bar_carries_its_value_and_names_are_escaped() {
        let labels = vec!["09:00".to_owned(), "10:00".to_owned()];
        let series = [Series {
            name: "A<b>",
            legend: "A<b> (4)".to_owned(),
            color: "#123456",
            values: vec![0, 4],
        }];
        let svg = bars(&Chart {
            id: "c",
            height: 200.0,
            title: "T & t",
            description: "d",
            labels: &labels,
            series: &series,
        });
        assert!(
            svg.contains("<title id=\"c-title\">T &amp; t</title>"),
            "{svg}"
        );
        assert!(
            svg.contains("data-interval=\"10:00\" data-value=\"4\""),
            "{svg}"
        );
        assert!(
            svg.contains("data-interval=\"09:00\" data-value=\"0\""),
            "{svg}"
        );
        assert!(!svg.contains("A<b>"));
        assert!(svg.contains("A&lt;b&gt; (4)"));
    }
}
