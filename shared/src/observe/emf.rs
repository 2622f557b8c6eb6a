//! CloudWatch Embedded Metric Format: in Lambda, where nothing scrapes
//! `/metrics`, each invocation prints one JSON line to stdout that CloudWatch
//! turns into metrics (no API call, no agent, no added latency). The figures
//! and their names match the Prometheus ones, in CloudWatch's naming: the
//! metric `Published` in namespace `RelayOps` with dimension `Function`.
//! See <https://docs.aws.amazon.com/AmazonCloudWatch/latest/monitoring/CloudWatch_Embedded_Metric_Format_Specification.html>.
use serde_json::{json, Map, Value};

/// The namespace every RelayOps metric is filed under.
pub const NAMESPACE: &str = "RelayOps";

/// CloudWatch units used here.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unit {
    Count,
    Milliseconds,
    Seconds,
}

impl Unit {
    fn as_str(self) -> &'static str {
        match self {
            Self::Count => "Count",
            Self::Milliseconds => "Milliseconds",
            Self::Seconds => "Seconds",
        }
    }
}

/// One metric of a document: a number, or (for a histogram) up to 100 numbers.
#[derive(Debug, Clone, PartialEq)]
pub struct Figure {
    pub name: String,
    pub value: Value,
    pub unit: Unit,
}

/// One EMF document: `dimensions` (bounded values only, as for Prometheus
/// labels) and the metric values of this invocation.
pub fn document(dimensions: &[(&str, &str)], values: &[(&str, f64, Unit)], timestamp_ms: i64) -> Value {
    let figures: Vec<Figure> = values
        .iter()
        .map(|(name, value, unit)| Figure { name: (*name).to_owned(), value: json!(value), unit: *unit })
        .collect();
    document_with(dimensions, &figures, &[], timestamp_ms)
}

/// As [`document`], with any figures and extra properties (searchable in
/// CloudWatch Logs Insights, not metrics: a request id, a status).
pub fn document_with(
    dimensions: &[(&str, &str)],
    figures: &[Figure],
    properties: &[(&str, Value)],
    timestamp_ms: i64,
) -> Value {
    let definitions: Vec<Value> =
        figures.iter().map(|figure| json!({ "Name": figure.name, "Unit": figure.unit.as_str() })).collect();
    let dimension_names: Vec<&str> = dimensions.iter().map(|(name, _)| *name).collect();
    let mut root = Map::new();
    for (name, value) in properties {
        root.insert((*name).into(), value.clone());
    }
    root.insert(
        "_aws".into(),
        json!({
            "Timestamp": timestamp_ms,
            "CloudWatchMetrics": [{ "Namespace": NAMESPACE, "Dimensions": [dimension_names], "Metrics": definitions }],
        }),
    );
    for (name, value) in dimensions {
        root.insert((*name).into(), json!(value));
    }
    for figure in figures {
        root.insert(figure.name.clone(), figure.value.clone());
    }
    Value::Object(root)
}

/// Prints the document as one line on stdout (logs go to stderr).
pub fn emit(dimensions: &[(&str, &str)], values: &[(&str, f64, Unit)]) {
    let now = chrono::Utc::now().timestamp_millis();
    println!("{}", document(dimensions, values, now));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_document_declares_each_metric_and_carries_its_value_at_the_root() {
        let doc = document(
            &[("Function", "publisher")],
            &[("Published", 3.0, Unit::Count), ("PublishLatency", 12.5, Unit::Milliseconds)],
            1_700_000_000_000,
        );
        let directive = &doc["_aws"]["CloudWatchMetrics"][0];
        assert_eq!(directive["Namespace"], "RelayOps");
        assert_eq!(directive["Dimensions"], json!([["Function"]]));
        assert_eq!(directive["Metrics"][1], json!({ "Name": "PublishLatency", "Unit": "Milliseconds" }));
        assert_eq!(doc["_aws"]["Timestamp"], 1_700_000_000_000i64);
        assert_eq!(doc["Function"], "publisher");
        assert_eq!(doc["Published"], 3.0);
        assert_eq!(doc["PublishLatency"], 12.5);
    }
}
