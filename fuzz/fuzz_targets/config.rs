//! Configuration text: JSON, TOML, or a Relay plugin configuration (`plugins.toml`). A config
//! that is accepted prints to JSON and TOML and reads back as the same config.
#![no_main]
use libfuzzer_sys::fuzz_target;
use relay_metrics::internals::config::ResourceMetricsConfig;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let Ok(config) = ResourceMetricsConfig::from_text(text) else {
        return;
    };
    let json = serde_json::to_string(&config).expect("an accepted config serialises to JSON");
    assert_eq!(
        ResourceMetricsConfig::from_text(&json).as_ref(),
        Ok(&config),
        "{json}"
    );
});
