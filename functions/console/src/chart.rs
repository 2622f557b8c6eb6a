//! Attempts by outcome over time as an inline SVG bar chart, drawn on the
//! server: one stacked bar per time bucket (delivered, retried, failed or
//! dead), a hover title per bar. Colours come from the stylesheet (classes),
//! so the chart needs neither script nor inline styles.
use chrono::{DateTime, Duration, Utc};
use maud::{html, Markup};

const WIDTH: f64 = 240.0;
const HEIGHT: f64 = 48.0;

/// Attempt counts per bucket, by outcome.
#[derive(Debug, Clone)]
pub struct Series {
    pub start: DateTime<Utc>,
    pub bucket_secs: i64,
    delivered: Vec<i64>,
    retried: Vec<i64>,
    failed: Vec<i64>,
}

impl Series {
    pub fn new(start: DateTime<Utc>, bucket_secs: i64, buckets: usize) -> Self {
        Self { start, bucket_secs, delivered: vec![0; buckets], retried: vec![0; buckets], failed: vec![0; buckets] }
    }

    /// Counts `attempts` with `outcome` in the bucket starting at `bucket`.
    pub fn add(&mut self, bucket: DateTime<Utc>, outcome: &str, attempts: i64) {
        let index = (bucket - self.start).num_seconds().div_euclid(self.bucket_secs.max(1));
        let Ok(index) = usize::try_from(index) else { return };
        let column = match outcome {
            "delivered" => &mut self.delivered,
            "retry" => &mut self.retried,
            _ => &mut self.failed,
        };
        if let Some(slot) = column.get_mut(index) {
            *slot += attempts;
        }
    }

    fn total(&self, index: usize) -> i64 {
        self.delivered[index] + self.retried[index] + self.failed[index]
    }
}

/// One bar: its hover title and its stacked parts (class, y, height).
struct Bar {
    title: String,
    parts: Vec<(&'static str, f64, f64)>,
}

fn bars(series: &Series) -> Vec<Bar> {
    let peak = (0..series.delivered.len()).map(|index| series.total(index)).max().unwrap_or(0).max(1) as f64;
    (0..series.delivered.len())
        .map(|index| {
            let from = series.start + Duration::seconds(series.bucket_secs * index as i64);
            let counts = [
                ("delivered", series.delivered[index]),
                ("retry", series.retried[index]),
                ("failed", series.failed[index]),
            ];
            let title = format!(
                "{} UTC: {} delivered, {} retried, {} failed or dead",
                from.format("%m-%d %H:%M"),
                counts[0].1,
                counts[1].1,
                counts[2].1
            );
            let mut top = HEIGHT;
            let parts = counts
                .into_iter()
                .filter(|(_, count)| *count > 0)
                .map(|(class, count)| {
                    let height = (count as f64 / peak * (HEIGHT - 2.0)).max(1.5);
                    top -= height;
                    (class, top, height)
                })
                .collect();
            Bar { title, parts }
        })
        .collect()
}

/// The chart; `label` names it for screen readers.
pub fn outcome_chart(series: &Series, label: &str) -> Markup {
    let slot = WIDTH / series.delivered.len().max(1) as f64;
    let width = format!("{:.2}", (slot - 1.0).max(1.0));
    html! {
        svg.chart viewBox=(format!("0 0 {WIDTH} {HEIGHT}")) preserveAspectRatio="none" role="img" aria-label=(label) {
            line.axis x1="0" y1=(HEIGHT) x2=(WIDTH) y2=(HEIGHT) {}
            @for (index, bar) in bars(series).into_iter().enumerate() {
                g {
                    title { (bar.title) }
                    @for (class, y, height) in bar.parts {
                        rect class=(class) x=(format!("{:.2}", index as f64 * slot)) y=(format!("{y:.2}"))
                            width=(width) height=(format!("{height:.2}")) {}
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn attempts_land_in_their_bucket_and_out_of_range_ones_are_dropped() {
        let start = DateTime::from_timestamp(1_764_000_000, 0).unwrap();
        let mut series = Series::new(start, 3600, 24);
        series.add(start + Duration::hours(2), "delivered", 3);
        series.add(start + Duration::hours(2), "dead", 1);
        series.add(start - Duration::hours(1), "delivered", 9);
        series.add(start + Duration::hours(30), "delivered", 9);
        assert_eq!(series.total(2), 4);
        assert_eq!((0..24).map(|i| series.total(i)).sum::<i64>(), 4);
        let svg = outcome_chart(&series, "attempts").into_string();
        assert_eq!(svg.matches("<rect").count(), 2, "{svg}");
        assert!(svg.contains("3 delivered, 0 retried, 1 failed or dead"));
    }
}
