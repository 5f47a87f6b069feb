//! Reading a Prometheus text exposition: one sample, or the sum of the samples whose
//! labels include given pairs. Good enough for the series watchgate exports (label values
//! never contain `",`); the real parser's verdict is `metrics_text_parses_with_prometheus_client`.

use std::collections::BTreeMap;

/// `name{k="v",…} value` → labels and value; None for comments and other metrics.
pub fn parse_line<'a>(line: &'a str, name: &str) -> Option<(BTreeMap<&'a str, &'a str>, f64)> {
    let rest = line.strip_prefix(name)?;
    let (labels, value) = match rest.strip_prefix('{') {
        Some(r) => {
            let (labels, value) = r.split_once("} ")?;
            (labels, value)
        }
        None => ("", rest.strip_prefix(' ')?),
    };
    let mut map = BTreeMap::new();
    for pair in labels.split("\",").filter(|p| !p.is_empty()) {
        let (k, v) = pair.split_once("=\"")?;
        map.insert(k, v.trim_end_matches('"'));
    }
    Some((map, value.trim().parse().ok()?))
}

/// The sum of `name`'s samples whose labels include every pair of `want`.
pub fn sample(text: &str, name: &str, want: &[(&str, &str)]) -> f64 {
    samples(text, name, want).map(|(_, v)| v).sum()
}

/// `name`'s samples whose labels include every pair of `want`.
pub fn samples<'a>(
    text: &'a str,
    name: &'a str,
    want: &'a [(&'a str, &'a str)],
) -> impl Iterator<Item = (BTreeMap<&'a str, &'a str>, f64)> + 'a {
    text.lines()
        .filter_map(move |l| parse_line(l, name))
        .filter(move |(labels, _)| want.iter().all(|(k, v)| labels.get(k) == Some(v)))
}
