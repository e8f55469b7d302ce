//! The mount table of this process's mount namespace
//! (`/proc/self/mountinfo`), which the lab's processes share with the host.

use std::path::{Path, PathBuf};

use etcd_lab_common::{IoContext, IoError};

/// One line of `/proc/self/mountinfo`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mount {
    /// `major:minor` of the mounted filesystem: every bind of one
    /// filesystem has the same.
    pub device: String,
    pub mount_point: PathBuf,
    pub fs_type: String,
    pub source: String,
}

/// Parses the mount table; lines that do not parse are skipped.
pub fn parse(text: &str) -> Vec<Mount> {
    text.lines().filter_map(parse_line).collect()
}

/// `36 35 98:0 /mnt1 /mnt2 rw,noatime master:1 - ext3 /dev/root rw`: mount
/// id, parent id, device, root, mount point, options, optional fields up to
/// `-`, then type, source and super options.
fn parse_line(line: &str) -> Option<Mount> {
    let mut fields = line.split(' ');
    let device = fields.nth(2)?.to_owned();
    let mount_point = PathBuf::from(unescape(fields.nth(1)?));
    let mut rest = fields.skip_while(|f| *f != "-").skip(1);
    let fs_type = unescape(rest.next()?);
    let source = unescape(rest.next()?);
    Some(Mount {
        device,
        mount_point,
        fs_type,
        source,
    })
}

/// Undoes the kernel's octal escapes (`\040` for a space, `\011`, `\012`,
/// `\134`).
fn unescape(field: &str) -> String {
    let bytes = field.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let octal = bytes
            .get(i + 1..i + 4)
            .filter(|d| bytes[i] == b'\\' && d.iter().all(|b| (b'0'..=b'7').contains(b)))
            .map(|d| d.iter().fold(0u32, |n, b| n * 8 + u32::from(b - b'0')));
        match octal.and_then(|n| u8::try_from(n).ok()) {
            Some(byte) => {
                out.push(byte);
                i += 4;
            }
            None => {
                out.push(bytes[i]);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// The mount table of this mount namespace.
pub fn read() -> Result<Vec<Mount>, IoError> {
    let text = std::fs::read_to_string("/proc/self/mountinfo")
        .context(|| "read /proc/self/mountinfo".into())?;
    Ok(parse(&text))
}

/// The topmost mount at exactly `path`.
pub fn at<'a>(mounts: &'a [Mount], path: &Path) -> Option<&'a Mount> {
    mounts.iter().rev().find(|m| m.mount_point == path)
}

/// Mount points at or below `root`, deepest first.
pub fn under(mounts: &[Mount], root: &Path) -> Vec<PathBuf> {
    let mut found: Vec<PathBuf> = mounts
        .iter()
        .filter(|m| m.mount_point.starts_with(root))
        .map(|m| m.mount_point.clone())
        .collect();
    found.sort_by_key(|p| std::cmp::Reverse(p.components().count()));
    found.dedup();
    found
}

#[cfg(test)]
mod tests {
    use super::*;

    const TABLE: &str = "\
22 27 0:21 / /proc rw,relatime - proc proc rw
27 1 254:0 / / rw,relatime - ext4 /dev/vda rw
42 27 254:0 /run/netns /run/netns rw,relatime shared:1 - ext4 /dev/vda rw
90 27 7:3 / /lab/network-volumes/pvc-1 rw,relatime - ext4 /dev/loop3 rw
91 27 7:3 / /lab/nodes/n1/pods/u1/volumes/pvc/data rw,relatime - ext4 /dev/loop3 rw
92 27 0:50 / /lab/with\\040space rw - tmpfs tmpfs rw
";

    #[test]
    fn reads_device_mount_point_type_and_source() {
        let mounts = parse(TABLE);
        assert_eq!(mounts.len(), 6);
        assert_eq!(
            mounts[3],
            Mount {
                device: "7:3".into(),
                mount_point: "/lab/network-volumes/pvc-1".into(),
                fs_type: "ext4".into(),
                source: "/dev/loop3".into(),
            }
        );
        // Optional fields (`shared:1`) are skipped.
        assert_eq!(mounts[2].fs_type, "ext4");
        assert_eq!(mounts[5].mount_point, PathBuf::from("/lab/with space"));
    }

    #[test]
    fn finds_mounts_at_and_under_a_path() {
        let mounts = parse(TABLE);
        assert_eq!(
            at(&mounts, Path::new("/lab/network-volumes/pvc-1")).map(|m| m.device.as_str()),
            Some("7:3")
        );
        assert_eq!(at(&mounts, Path::new("/lab/network-volumes")), None);
        assert_eq!(
            under(&mounts, Path::new("/lab")),
            vec![
                PathBuf::from("/lab/nodes/n1/pods/u1/volumes/pvc/data"),
                PathBuf::from("/lab/network-volumes/pvc-1"),
                PathBuf::from("/lab/with space"),
            ]
        );
    }

    #[test]
    fn unescapes_octal_sequences_only() {
        assert_eq!(unescape("a\\040b\\011c\\134d"), "a b\tc\\d");
        assert_eq!(unescape("plain\\x"), "plain\\x");
        assert_eq!(unescape("end\\04"), "end\\04");
    }
}
