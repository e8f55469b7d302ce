//! Sizes of volumes as Kubernetes quantities (`1Gi`, `500M`, `1e9`).

use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

/// The value of a quantity in base units (bytes for storage), or `None` if
/// it is not a valid quantity.
pub fn bytes(quantity: &Quantity) -> Option<f64> {
    let text = quantity.0.trim();
    let split = text
        .find(|c: char| !(c.is_ascii_digit() || c == '.' || c == '+' || c == '-'))
        .unwrap_or(text.len());
    let (number, suffix) = text.split_at(split);
    let number: f64 = number.parse().ok()?;
    let factor = match suffix {
        "" => 1.0,
        "Ki" => 1024f64,
        "Mi" => 1024f64.powi(2),
        "Gi" => 1024f64.powi(3),
        "Ti" => 1024f64.powi(4),
        "Pi" => 1024f64.powi(5),
        "Ei" => 1024f64.powi(6),
        "n" => 1e-9,
        "u" => 1e-6,
        "m" => 1e-3,
        "k" => 1e3,
        "M" => 1e6,
        "G" => 1e9,
        "T" => 1e12,
        "P" => 1e15,
        "E" => 1e18,
        exponent if exponent.starts_with(['e', 'E']) => {
            10f64.powi(exponent.get(1..)?.parse::<i32>().ok()?)
        }
        _ => return None,
    };
    Some(number * factor)
}

/// Whether `a` is strictly larger than `b`; invalid quantities compare as
/// not larger.
pub fn is_larger(a: &Quantity, b: &Quantity) -> bool {
    matches!((bytes(a), bytes(b)), (Some(a), Some(b)) if a > b)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn q(s: &str) -> Quantity {
        Quantity(s.to_owned())
    }

    #[test]
    fn parses_binary_decimal_and_exponent_forms() {
        assert_eq!(bytes(&q("1Gi")), Some(1073741824.0));
        assert_eq!(bytes(&q("500M")), Some(5e8));
        assert_eq!(bytes(&q("1e3")), Some(1000.0));
        assert_eq!(bytes(&q("1.5Ki")), Some(1536.0));
        assert_eq!(bytes(&q("42")), Some(42.0));
        assert_eq!(bytes(&q("1Xi")), None);
        assert_eq!(bytes(&q("")), None);
    }

    #[test]
    fn compares_across_units() {
        assert!(is_larger(&q("2Gi"), &q("1Gi")));
        assert!(is_larger(&q("1Gi"), &q("1G")));
        assert!(!is_larger(&q("1024Mi"), &q("1Gi")));
        assert!(!is_larger(&q("bogus"), &q("1Gi")));
    }
}
