//! etcd releases and the rules for moving a cluster between them: patch
//! releases freely, one minor release at a time, up by a rolling upgrade
//! and down only through etcd's downgrade API.

use std::cmp::Ordering;
use std::fmt;

/// An etcd release `major.minor.patch`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Release {
    /// Major release.
    pub major: u32,
    /// Minor release.
    pub minor: u32,
    /// Patch release.
    pub patch: u32,
}

impl Release {
    /// Reads `3.6.16` (also `v3.6.16`); `None` for anything else.
    pub fn parse(text: &str) -> Option<Self> {
        let text = text.strip_prefix('v').unwrap_or(text);
        let mut parts = text.split('.').map(|p| p.parse::<u32>().ok());
        let release = Self {
            major: parts.next()??,
            minor: parts.next()??,
            patch: parts.next()??,
        };
        parts.next().is_none().then_some(release)
    }

    /// The minor release line, e.g. `3.6`.
    pub fn line(self) -> String {
        format!("{}.{}", self.major, self.minor)
    }

    /// Whether two releases are of the same minor line.
    pub fn same_line(self, other: Self) -> bool {
        (self.major, self.minor) == (other.major, other.minor)
    }

    /// How a cluster on `self` moves to `to`.
    pub fn step_to(self, to: Self) -> ReleaseStep {
        match (self.major.cmp(&to.major), self.minor.cmp(&to.minor)) {
            (Ordering::Equal, Ordering::Equal) => ReleaseStep::Patch,
            (Ordering::Equal, Ordering::Less) if to.minor == self.minor + 1 => {
                ReleaseStep::MinorUpgrade
            }
            (Ordering::Equal, Ordering::Greater) if to.minor + 1 == self.minor => {
                ReleaseStep::MinorDowngrade
            }
            _ => ReleaseStep::Unsupported,
        }
    }

    /// The oldest patch of this release's line from which etcd documents a
    /// rolling upgrade to the next minor release (e.g. 3.6.11 before 3.7).
    pub fn upgrade_floor(self) -> Option<Self> {
        UPGRADE_FLOORS
            .iter()
            .find(|((major, minor), _)| (*major, *minor) == (self.major, self.minor))
            .map(|(_, patch)| Self {
                patch: *patch,
                ..self
            })
    }
}

impl fmt::Display for Release {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}.{}", self.major, self.minor, self.patch)
    }
}

/// etcd's upgrade guides: the minimum patch of a minor line before its
/// members may roll to the next minor (3.6 → 3.7: "3.6.11 or later").
const UPGRADE_FLOORS: &[((u32, u32), u32)] = &[((3, 6), 11)];

/// How a cluster moves from one release to another.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReleaseStep {
    /// Within a minor line, either way: members roll.
    Patch,
    /// One minor up: members roll, the cluster version follows once all run it.
    MinorUpgrade,
    /// One minor down: etcd's downgrade is enabled first, then members roll.
    MinorDowngrade,
    /// More than one minor, or another major: etcd cannot do it.
    Unsupported,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn r(text: &str) -> Release {
        Release::parse(text).unwrap_or_else(|| panic!("{text} parses"))
    }

    #[test]
    fn releases_parse_with_or_without_v_and_nothing_else() {
        assert_eq!(r("3.6.16").to_string(), "3.6.16");
        assert_eq!(r("v3.7.3").line(), "3.7");
        for bad in ["3.6", "3.6.16.1", "3.x.1", "", "latest"] {
            assert_eq!(Release::parse(bad), None, "{bad}");
        }
    }

    #[test]
    fn one_minor_at_a_time_either_way() {
        assert_eq!(r("3.6.5").step_to(r("3.6.16")), ReleaseStep::Patch);
        assert_eq!(r("3.6.16").step_to(r("3.6.5")), ReleaseStep::Patch);
        assert_eq!(r("3.6.16").step_to(r("3.7.3")), ReleaseStep::MinorUpgrade);
        assert_eq!(r("3.7.3").step_to(r("3.6.16")), ReleaseStep::MinorDowngrade);
        assert_eq!(r("3.5.21").step_to(r("3.7.3")), ReleaseStep::Unsupported);
        assert_eq!(r("3.7.3").step_to(r("3.5.21")), ReleaseStep::Unsupported);
        assert_eq!(r("3.7.3").step_to(r("4.0.0")), ReleaseStep::Unsupported);
    }

    #[test]
    fn the_3_6_line_needs_3_6_11_before_3_7() {
        assert_eq!(r("3.6.5").upgrade_floor(), Some(r("3.6.11")));
        assert!(r("3.6.16") >= r("3.6.11"));
        assert!(r("3.6.5") < r("3.6.11"));
        assert_eq!(r("3.7.3").upgrade_floor(), None);
    }
}
