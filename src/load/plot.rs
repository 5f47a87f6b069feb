//! `--plot out.svg`: latency over the run (p50/p99/max per second) and its CDF, drawn as
//! SVG (text stays text: no font files needed). Watch runs plot delivery latency (per
//! second of write time); runs that only list plot list latency (per second of the list's
//! start).

use std::path::Path;

use anyhow::Context as _;
use hdrhistogram::Histogram;
use plotters::prelude::*;

/// What a plot's latencies are.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PlotKind {
    /// Write to watcher, by the second the write was made.
    Delivery,
    /// One complete list (all pages), by the second it started.
    List,
}

impl PlotKind {
    fn name(self) -> &'static str {
        match self {
            Self::Delivery => "delivery latency",
            Self::List => "list latency",
        }
    }
    fn x_desc(self) -> &'static str {
        match self {
            Self::Delivery => "second of the run (write time)",
            Self::List => "second of the run (list start)",
        }
    }
}

/// Plot data: per second (p50, p99, max) in ms, and the CDF points (ms, fraction).
pub struct PlotData {
    pub kind: PlotKind,
    pub title: String,
    pub per_second: Vec<(f64, f64, f64, f64)>,
    pub cdf: Vec<(f64, f64)>,
}

impl PlotData {
    pub fn from_histograms(
        kind: PlotKind,
        title: String,
        per_second: &[Histogram<u64>],
        total: &Histogram<u64>,
    ) -> Self {
        let ms = |us: u64| us as f64 / 1000.0;
        let per_second = per_second
            .iter()
            .enumerate()
            .filter(|(_, h)| !h.is_empty())
            .map(|(i, h)| {
                (
                    i as f64,
                    ms(h.value_at_quantile(0.5)),
                    ms(h.value_at_quantile(0.99)),
                    ms(h.max()),
                )
            })
            .collect();
        let mut cdf = Vec::new();
        let n = total.len() as f64;
        let mut seen = 0u64;
        for v in total.iter_recorded() {
            seen += v.count_since_last_iteration();
            cdf.push((ms(v.value_iterated_to()).max(0.001), seen as f64 / n));
        }
        Self {
            kind,
            title,
            per_second,
            cdf,
        }
    }
}

pub fn write_svg(path: &Path, data: &PlotData) -> anyhow::Result<()> {
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    }
    let root = SVGBackend::new(path, (1200, 480)).into_drawing_area();
    root.fill(&WHITE)?;
    let root = root.titled(&data.title, ("sans-serif", 18))?;
    let (left, right) = root.split_horizontally(620);

    let t_max = data.per_second.last().map(|p| p.0 + 1.0).unwrap_or(1.0);
    let y_max = data.per_second.iter().map(|p| p.3).fold(1.0f64, f64::max) * 1.1;
    let mut c = ChartBuilder::on(&left)
        .caption(
            format!("{} over the run", data.kind.name()),
            ("sans-serif", 15),
        )
        .margin(10)
        .x_label_area_size(35)
        .y_label_area_size(55)
        .build_cartesian_2d(0f64..t_max, (0.01f64..y_max).log_scale())?;
    c.configure_mesh()
        .x_desc(data.kind.x_desc())
        .y_desc("ms")
        .draw()?;
    let series = [
        ("p50", 1usize, BLUE),
        ("p99", 2, RED),
        ("max", 3, RGBColor(128, 128, 128)),
    ];
    for (name, idx, color) in series {
        let pts: Vec<(f64, f64)> = data
            .per_second
            .iter()
            .map(|p| {
                let v = match idx {
                    1 => p.1,
                    2 => p.2,
                    _ => p.3,
                };
                (p.0, v.max(0.011))
            })
            .collect();
        c.draw_series(LineSeries::new(pts, color.stroke_width(2)))?
            .label(name)
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 18, y)], color));
    }
    c.configure_series_labels()
        .border_style(BLACK)
        .background_style(WHITE.mix(0.8))
        .draw()?;

    let x_max = data.cdf.last().map(|p| p.0).unwrap_or(1.0).max(0.02) * 1.2;
    let mut c = ChartBuilder::on(&right)
        .caption(format!("{} CDF", data.kind.name()), ("sans-serif", 15))
        .margin(10)
        .x_label_area_size(35)
        .y_label_area_size(45)
        .build_cartesian_2d((0.01f64..x_max).log_scale(), 0f64..1.0)?;
    c.configure_mesh().x_desc("ms").y_desc("fraction").draw()?;
    c.draw_series(LineSeries::new(
        data.cdf.iter().copied(),
        BLUE.stroke_width(2),
    ))?;
    root.present()?;
    Ok(())
}

/// A memory plot: the target's RSS (MiB) by second of the run, with labelled vertical
/// markers (e.g. the moment the stalled watchers joined).
pub fn write_rss_svg(
    path: &Path,
    title: &str,
    points: &[(f64, f64)],
    markers: &[(f64, String)],
) -> anyhow::Result<()> {
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    }
    let root = SVGBackend::new(path, (1200, 480)).into_drawing_area();
    root.fill(&WHITE)?;
    let t_max = points.last().map(|p| p.0 + 1.0).unwrap_or(1.0);
    let y_max = points.iter().map(|p| p.1).fold(1.0f64, f64::max) * 1.15;
    let mut c = ChartBuilder::on(&root)
        .caption(title, ("sans-serif", 16))
        .margin(10)
        .x_label_area_size(35)
        .y_label_area_size(55)
        .build_cartesian_2d(0f64..t_max, 0f64..y_max)?;
    c.configure_mesh()
        .x_desc("second of the run")
        .y_desc("RSS (MiB)")
        .draw()?;
    c.draw_series(LineSeries::new(
        points.iter().copied(),
        BLUE.stroke_width(2),
    ))?
    .label("gateway RSS")
    .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 18, y)], BLUE));
    for (t, label) in markers {
        c.draw_series(LineSeries::new(
            [(*t, 0.0), (*t, y_max)],
            RGBColor(200, 0, 0).stroke_width(1),
        ))?;
        c.draw_series(std::iter::once(Text::new(
            label.clone(),
            (*t, y_max * 0.97),
            ("sans-serif", 13),
        )))?;
    }
    c.configure_series_labels()
        .border_style(BLACK)
        .background_style(WHITE.mix(0.8))
        .draw()?;
    root.present()?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn draws_an_svg() {
        let mut total = crate::load::stats::histogram();
        let mut per = vec![
            crate::load::stats::histogram(),
            crate::load::stats::histogram(),
        ];
        for us in [100u64, 200, 1500, 40_000] {
            total.record(us).unwrap();
            per[(us % 2) as usize].record(us).unwrap();
        }
        let data = PlotData::from_histograms(PlotKind::Delivery, "t".into(), &per, &total);
        assert_eq!(data.cdf.last().unwrap().1, 1.0);
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("x/plot.svg");
        write_svg(&p, &data).unwrap();
        let svg = std::fs::read_to_string(&p).unwrap();
        assert!(
            svg.starts_with("<svg")
                && svg.contains("delivery latency over the run")
                && svg.contains("delivery latency CDF"),
            "{}",
            &svg[..200]
        );
        let data = PlotData::from_histograms(PlotKind::List, "t".into(), &per, &total);
        write_svg(&p, &data).unwrap();
        let svg = std::fs::read_to_string(&p).unwrap();
        assert!(
            svg.contains("list latency over the run")
                && svg.contains("list latency CDF")
                && svg.contains("list start")
                && !svg.contains("delivery"),
            "{}",
            &svg[..200]
        );
    }

    #[test]
    fn draws_a_memory_plot() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("rss.svg");
        let pts = [(0.0, 40.0), (1.0, 42.5), (2.0, 41.0)];
        write_rss_svg(&p, "soak", &pts, &[(1.0, "stalled join".into())]).unwrap();
        let svg = std::fs::read_to_string(&p).unwrap();
        assert!(
            svg.contains("RSS (MiB)") && svg.contains("stalled join") && svg.contains("soak"),
            "{}",
            &svg[..200]
        );
    }
}
