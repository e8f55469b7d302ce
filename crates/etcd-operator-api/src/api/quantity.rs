//! Storage quantities (`10Gi`, `500M`, `1.5Gi`) as bytes, to compare a
//! volume's size with the spec's.

use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

/// The bytes a quantity stands for, rounded up to a whole byte; `None` for
/// a quantity that is not a plain or suffixed number (or too large).
pub fn bytes(quantity: &Quantity) -> Option<u64> {
    let text = quantity.0.trim();
    let split = text
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(text.len());
    let (number, suffix) = text.split_at(split);
    let multiplier: u128 = match suffix {
        "" => 1,
        "k" => 1_000,
        "M" => 1_000_000,
        "G" => 1_000_000_000,
        "T" => 1_000_000_000_000,
        "P" => 1_000_000_000_000_000,
        "E" => 1_000_000_000_000_000_000,
        "Ki" => 1 << 10,
        "Mi" => 1 << 20,
        "Gi" => 1 << 30,
        "Ti" => 1 << 40,
        "Pi" => 1 << 50,
        "Ei" => 1 << 60,
        _ => return None,
    };
    let (whole, fraction) = number.split_once('.').unwrap_or((number, ""));
    if whole.is_empty() && fraction.is_empty() {
        return None;
    }
    let whole: u128 = if whole.is_empty() {
        0
    } else {
        whole.parse().ok()?
    };
    let mut total = whole.checked_mul(multiplier)?;
    if !fraction.is_empty() {
        let digits = u32::try_from(fraction.len()).ok()?;
        let scale = 10u128.checked_pow(digits)?;
        let part: u128 = fraction.parse().ok()?;
        total = total.checked_add((part.checked_mul(multiplier)?).div_ceil(scale))?;
    }
    u64::try_from(total).ok()
}

/// A size in the binary unit that says it best: `2Gi`, `1536Mi`, `100`.
pub fn human(bytes: u64) -> String {
    for (unit, size) in [
        ("Ti", 1u64 << 40),
        ("Gi", 1 << 30),
        ("Mi", 1 << 20),
        ("Ki", 1 << 10),
    ] {
        if bytes >= size && bytes.is_multiple_of(size) {
            return format!("{}{unit}", bytes / size);
        }
    }
    bytes.to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn q(text: &str) -> Option<u64> {
        bytes(&Quantity(text.to_string()))
    }

    #[test]
    fn binary_decimal_and_fractional_quantities() {
        assert_eq!(q("1Gi"), Some(1 << 30));
        assert_eq!(q("512Mi"), Some(512 << 20));
        assert_eq!(q("10G"), Some(10_000_000_000));
        assert_eq!(q("1.5Gi"), Some(3 << 29));
        assert_eq!(q("100"), Some(100));
        assert_eq!(q("0.5"), Some(1), "rounded up");
        for bad in ["", "Gi", "1Zi", "1e3", "-1Gi", "1..5Gi"] {
            assert_eq!(q(bad), None, "{bad}");
        }
    }

    #[test]
    fn sizes_read_back_in_their_largest_whole_unit() {
        assert_eq!(human(2 << 30), "2Gi");
        assert_eq!(human(1536 << 20), "1536Mi");
        assert_eq!(human(100), "100");
    }
}
