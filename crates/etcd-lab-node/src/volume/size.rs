//! Sizes of volumes: Kubernetes quantities (`1Gi`, `500M`, `1e9`) and the
//! size of the disk image the lab allocates for a request.

use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

/// One MiB: the lab allocates disks in whole MiB, as cloud disks come in
/// whole GiB. A MiB is a multiple of every ext4 block size, so the
/// filesystem covers the whole image.
pub const MIB: u64 = 1024 * 1024;

/// The smallest disk the lab allocates: below a few MiB `mkfs.ext4` leaves
/// out the journal, which would make small volumes a different filesystem.
pub const MIN_DISK_BYTES: u64 = 8 * MIB;

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

/// A storage quantity in whole bytes, rounded up as Kubernetes rounds a
/// fractional byte count; `None` for an invalid or negative quantity or one
/// too large for a disk.
pub fn storage_bytes(quantity: &Quantity) -> Option<u64> {
    let value = bytes(quantity)?;
    // 2^53: beyond it an f64 no longer holds every whole number.
    (0.0..=9.007_199_254_740_992e15)
        .contains(&value)
        .then(|| value.ceil() as u64)
}

/// Whether `a` is strictly larger than `b`; invalid quantities compare as
/// not larger.
pub fn is_larger(a: &Quantity, b: &Quantity) -> bool {
    matches!((bytes(a), bytes(b)), (Some(a), Some(b)) if a > b)
}

/// The size of the disk allocated for a request of `requested` bytes: whole
/// MiB, at least [`MIN_DISK_BYTES`].
pub fn disk_bytes(requested: u64) -> u64 {
    requested
        .div_ceil(MIB)
        .saturating_mul(MIB)
        .max(MIN_DISK_BYTES)
}

/// The capacity a volume reports for a request: the request itself when the
/// disk is exactly that size (`1Gi` stays `1Gi`), else the disk's size in
/// MiB (a `1G` request gets a `954Mi` disk).
pub fn disk_capacity(request: &Quantity) -> Option<(Quantity, u64)> {
    let requested = storage_bytes(request)?;
    let disk = disk_bytes(requested);
    let capacity = if disk == requested {
        request.clone()
    } else {
        Quantity(format!("{}Mi", disk / MIB))
    };
    Some((capacity, disk))
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
    fn storage_is_whole_bytes_rounded_up() {
        assert_eq!(storage_bytes(&q("64Mi")), Some(64 * MIB));
        assert_eq!(storage_bytes(&q("1500m")), Some(2));
        assert_eq!(storage_bytes(&q("-1Gi")), None);
        assert_eq!(storage_bytes(&q("1Ei")), None);
        assert_eq!(storage_bytes(&q("bogus")), None);
    }

    #[test]
    fn compares_across_units() {
        assert!(is_larger(&q("2Gi"), &q("1Gi")));
        assert!(is_larger(&q("1Gi"), &q("1G")));
        assert!(!is_larger(&q("1024Mi"), &q("1Gi")));
        assert!(!is_larger(&q("bogus"), &q("1Gi")));
    }

    #[test]
    fn disks_are_whole_mib_and_not_below_the_minimum() {
        assert_eq!(disk_bytes(64 * MIB), 64 * MIB);
        assert_eq!(disk_bytes(64 * MIB + 1), 65 * MIB);
        assert_eq!(disk_bytes(1), MIN_DISK_BYTES);
        assert_eq!(disk_bytes(0), MIN_DISK_BYTES);
    }

    #[test]
    fn capacity_keeps_the_request_when_the_disk_matches_it() {
        assert_eq!(disk_capacity(&q("1Gi")), Some((q("1Gi"), 1024 * MIB)));
        assert_eq!(disk_capacity(&q("1G")), Some((q("954Mi"), 954 * MIB)));
        assert_eq!(disk_capacity(&q("1Mi")), Some((q("8Mi"), 8 * MIB)));
        assert_eq!(disk_capacity(&q("nonsense")), None);
    }
}
