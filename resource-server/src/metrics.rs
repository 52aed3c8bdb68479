//! Prometheus metrics through the `prometheus-client` crate, the one way every binary writes its
//! `/metrics`: one [`Registry`] per server, encoded as OpenMetrics text by [`encode`]. Figures
//! kept elsewhere (atomics on the request path, state swapped on reload, `/proc`) are read at
//! each scrape by a [`Collect`] collector writing through a [`Scrape`].
//!
//! Help texts are written without their full stop: the crate adds it to registered metrics, and
//! [`Scrape`] does the same. Counter names are written without `_total`: the encoder adds it.

use std::fmt;

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{
    DescriptorEncoder, EncodeCounterValue, EncodeGaugeValue, EncodeLabelSet, EncodeMetric,
};
use prometheus_client::metrics::MetricType;
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::{ConstGauge, Gauge};
use prometheus_client::metrics::histogram::Histogram;
pub use prometheus_client::registry::Registry;

/// The content type of [`encode`]'s text (Prometheus asks for it first).
pub const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// The OpenMetrics text of `registry`, ending with `# EOF`.
pub fn encode(registry: &Registry) -> String {
    let mut text = String::with_capacity(8192);
    // Writing into a String never fails; a collector's own error would end the text early.
    if let Err(error) = prometheus_client::encoding::text::encode(&mut text, registry) {
        tracing::warn!(%error, "metrics could not be encoded");
    }
    text
}

/// The text of one collector alone, names starting with `prefix_` (none when empty): for tests
/// and for tools that want one part.
pub fn text(
    prefix: &str,
    collect: impl Fn(&mut Scrape) -> fmt::Result + Send + Sync + 'static,
) -> String {
    let mut registry = match prefix.trim_end_matches('_') {
        "" => Registry::default(),
        p => Registry::with_prefix(p),
    };
    registry.register_collector(Box::new(Collect(collect)));
    encode(&registry)
}

/// `build_info{version="…"} 1`, a gauge, in `registry`.
pub fn register_build_info(registry: &mut Registry, help: &str, version: &'static str) {
    let info = Family::<[(&'static str, &'static str); 1], Gauge>::default();
    info.get_or_create(&[("version", version)]).set(1);
    registry.register("build_info", help, info);
}

/// A label set of one label, as the families of [`histograms`] are keyed.
pub type OneLabel = [(&'static str, &'static str); 1];

/// A histogram family keyed by one label, to register.
pub type HistogramFamily = Family<OneLabel, Histogram, fn() -> Histogram>;

/// A histogram family made by `new` (which sets the buckets) with one series per value of
/// `label`, made now so each shows from the start at 0, and each series' handle (in `values`'
/// order) to observe through.
pub fn histograms<const N: usize>(
    new: fn() -> Histogram,
    label: &'static str,
    values: [&'static str; N],
) -> (HistogramFamily, [Histogram; N]) {
    let family = HistogramFamily::new_with_constructor(new);
    let series = values.map(|value| family.get_or_create_owned(&[(label, value)]));
    (family, series)
}

/// A collector: `F` runs at each scrape and writes what it reads.
pub struct Collect<F>(pub F);

impl<F> fmt::Debug for Collect<F> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Collect")
    }
}

impl<F> Collector for Collect<F>
where
    F: Fn(&mut Scrape) -> fmt::Result + Send + Sync + 'static,
{
    fn encode(&self, encoder: DescriptorEncoder) -> fmt::Result {
        (self.0)(&mut Scrape(encoder))
    }
}

/// What a collector writes one scrape with: families of values read now.
pub struct Scrape<'a>(DescriptorEncoder<'a>);

impl Scrape<'_> {
    /// A counter without labels (`name` without `_total`).
    pub fn counter(
        &mut self,
        name: &str,
        help: &str,
        value: impl EncodeCounterValue,
    ) -> fmt::Result {
        self.metric(name, help, &ConstCounter::new(value))
    }

    /// A counter family, one series per `(labels, value)`.
    pub fn counters<L: EncodeLabelSet, N: EncodeCounterValue>(
        &mut self,
        name: &str,
        help: &str,
        series: impl IntoIterator<Item = (L, N)>,
    ) -> fmt::Result {
        let help = format!("{help}.");
        let mut family = self
            .0
            .encode_descriptor(name, &help, None, MetricType::Counter)?;
        for (labels, value) in series {
            ConstCounter::new(value).encode(family.encode_family(&labels)?)?;
        }
        Ok(())
    }

    /// A gauge without labels.
    pub fn gauge(&mut self, name: &str, help: &str, value: impl EncodeGaugeValue) -> fmt::Result {
        self.metric(name, help, &ConstGauge::new(value))
    }

    /// A gauge family, one series per `(labels, value)`.
    pub fn gauges<L: EncodeLabelSet, N: EncodeGaugeValue>(
        &mut self,
        name: &str,
        help: &str,
        series: impl IntoIterator<Item = (L, N)>,
    ) -> fmt::Result {
        let help = format!("{help}.");
        let mut family = self
            .0
            .encode_descriptor(name, &help, None, MetricType::Gauge)?;
        for (labels, value) in series {
            ConstGauge::new(value).encode(family.encode_family(&labels)?)?;
        }
        Ok(())
    }

    /// A metric of the crate kept by the caller (a histogram, a family).
    pub fn metric(&mut self, name: &str, help: &str, metric: &impl EncodeMetric) -> fmt::Result {
        let help = format!("{help}.");
        metric.encode(
            self.0
                .encode_descriptor(name, &help, None, metric.metric_type())?,
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn collectors_write_families_with_the_prefix_and_the_crates_suffixes() {
        let histogram = Histogram::new([0.5, 1.0]);
        histogram.observe(0.7);
        let text = text("x", move |s| {
            s.counter("hits", "Hits", 3u64)?;
            s.gauges("open", "Open", [([("listener", "proxy")], 2i64)])?;
            s.metric("took_seconds", "Took", &histogram)
        });
        for line in [
            "# HELP x_hits Hits.\n# TYPE x_hits counter\nx_hits_total 3\n",
            "x_open{listener=\"proxy\"} 2\n",
            "# TYPE x_took_seconds histogram\n",
            "x_took_seconds_bucket{le=\"0.5\"} 0\nx_took_seconds_bucket{le=\"1.0\"} 1\nx_took_seconds_bucket{le=\"+Inf\"} 1\n",
        ] {
            assert!(text.contains(line), "{line} in {text}");
        }
        assert!(text.ends_with("# EOF\n"), "{text}");
        let mut registry = Registry::with_prefix("y");
        register_build_info(&mut registry, "The version (always 1)", "1.2.3");
        assert!(
            encode(&registry)
                .contains("# TYPE y_build_info gauge\ny_build_info{version=\"1.2.3\"} 1\n")
        );
    }
}
