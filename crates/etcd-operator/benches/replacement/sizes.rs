//! The database sizes of the replacement bench, read from the environment.

/// Database sizes in MiB (`BENCH_REPLACEMENT_SIZES_MIB`, default `100,1024`).
pub fn sizes_mib() -> Vec<u64> {
    let sizes: Vec<u64> = std::env::var("BENCH_REPLACEMENT_SIZES_MIB")
        .ok()
        .map(|v| {
            v.split(',')
                .filter_map(|s| s.trim().parse().ok())
                .filter(|&s| s > 0)
                .collect()
        })
        .unwrap_or_default();
    if sizes.is_empty() {
        vec![100, 1024]
    } else {
        sizes
    }
}
