//! The ext4 filesystem of a disk image: its superblock read directly (how
//! big the filesystem is), and `mkfs.ext4`, `e2fsck` and `resize2fs`
//! (e2fsprogs) run on the image file while nothing has it mounted.

use std::io::{Read, Seek, SeekFrom};
use std::path::Path;
use std::process::Command;

use etcd_lab_common::IoContext;

use super::DiskError;

/// Where the superblock starts, and how long it is.
const SUPERBLOCK_OFFSET: u64 = 1024;
const SUPERBLOCK_LEN: usize = 1024;
const MAGIC: u16 = 0xEF53;
/// `s_feature_incompat` bit: block counts have a high 32-bit half.
const INCOMPAT_64BIT: u32 = 0x80;

/// What the superblock says about the filesystem's size.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Superblock {
    pub block_size: u64,
    pub blocks: u64,
}

impl Superblock {
    /// The filesystem's size in bytes (every block, metadata included).
    pub fn bytes(&self) -> u64 {
        self.block_size.saturating_mul(self.blocks)
    }
}

fn u32_at(block: &[u8], offset: usize) -> Option<u32> {
    let bytes = block.get(offset..offset + 4)?;
    Some(u32::from_le_bytes(bytes.try_into().ok()?))
}

/// Reads an ext2/3/4 superblock (the 1024 bytes at offset 1024 of the
/// device); `None` when there is none (a blank disk).
pub fn parse_superblock(block: &[u8]) -> Option<Superblock> {
    let magic = u16::from_le_bytes(block.get(0x38..0x3a)?.try_into().ok()?);
    if magic != MAGIC {
        return None;
    }
    let log_block_size = u32_at(block, 0x18)?;
    if log_block_size > 6 {
        return None;
    }
    let low = u64::from(u32_at(block, 0x04)?);
    let high = if u32_at(block, 0x60)? & INCOMPAT_64BIT != 0 {
        u64::from(u32_at(block, 0x150)?)
    } else {
        0
    };
    Some(Superblock {
        block_size: 1024 << log_block_size,
        blocks: (high << 32) | low,
    })
}

/// The superblock of the filesystem in `image`, if it holds one.
pub fn read_superblock(image: &Path) -> Result<Option<Superblock>, DiskError> {
    let mut file = std::fs::File::open(image).context(|| format!("open {}", image.display()))?;
    let mut block = vec![0u8; SUPERBLOCK_LEN];
    file.seek(SeekFrom::Start(SUPERBLOCK_OFFSET))
        .context(|| format!("seek in {}", image.display()))?;
    match file.read_exact(&mut block) {
        Ok(()) => Ok(parse_superblock(&block)),
        // Smaller than a superblock: blank.
        Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => Ok(None),
        Err(e) => Err(e)
            .context(|| format!("read the superblock of {}", image.display()))
            .map_err(DiskError::from),
    }
}

/// What the filesystem of an image needs before it is mounted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FilesystemStep {
    /// A blank disk: make the filesystem.
    Format,
    /// The disk grew (an offline expansion): check, then grow the
    /// filesystem to the disk.
    Grow { from: u64, to: u64 },
    /// The filesystem covers the disk.
    Ready,
}

/// Decides from the superblock and the image's length (pure).
pub fn plan(superblock: Option<Superblock>, image_len: u64) -> FilesystemStep {
    match superblock {
        None => FilesystemStep::Format,
        Some(sb) => {
            let fits = image_len - image_len % sb.block_size;
            if sb.bytes() < fits {
                FilesystemStep::Grow {
                    from: sb.bytes(),
                    to: fits,
                }
            } else {
                FilesystemStep::Ready
            }
        }
    }
}

/// Makes the filesystem, with the options the kubelet formats volumes with
/// (`-m0`: no blocks reserved for root). The image is a new sparse file
/// whose blocks already read as zeros, so inode tables and journal are not
/// written out (`lazy_itable_init`, `lazy_journal_init`).
pub fn format(image: &Path) -> Result<(), DiskError> {
    super::run(
        Command::new("mkfs.ext4")
            .args([
                "-q",
                "-F",
                "-m0",
                "-E",
                "lazy_itable_init=1,lazy_journal_init=1",
            ])
            .arg(image),
    )
    .map(|_| ())
}

/// Grows the filesystem to the image, offline: `e2fsck -fy` first (resize2fs
/// refuses an unchecked filesystem), then `resize2fs`.
pub fn grow(image: &Path) -> Result<(), DiskError> {
    // e2fsck: 0 = clean, 1 = errors corrected; anything else stops here.
    let check = Command::new("e2fsck")
        .arg("-fy")
        .arg(image)
        .output()
        .context(|| "run e2fsck".into())?;
    match check.status.code() {
        Some(0 | 1) => {}
        _ => {
            return Err(DiskError::Command {
                command: format!("e2fsck -fy {}", image.display()),
                message: format!(
                    "{}: {}",
                    check.status,
                    String::from_utf8_lossy(&check.stdout).trim()
                ),
            });
        }
    }
    super::run(Command::new("resize2fs").arg(image)).map(|_| ())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn superblock(blocks: u64, log_block_size: u32, sixty_four_bit: bool) -> Vec<u8> {
        let mut block = vec![0u8; SUPERBLOCK_LEN];
        block[0x04..0x08].copy_from_slice(&(blocks as u32).to_le_bytes());
        block[0x18..0x1c].copy_from_slice(&log_block_size.to_le_bytes());
        block[0x38..0x3a].copy_from_slice(&MAGIC.to_le_bytes());
        if sixty_four_bit {
            block[0x60..0x64].copy_from_slice(&INCOMPAT_64BIT.to_le_bytes());
            block[0x150..0x154].copy_from_slice(&((blocks >> 32) as u32).to_le_bytes());
        }
        block
    }

    #[test]
    fn reads_block_count_and_size() {
        let sb = parse_superblock(&superblock(65536, 0, false)).unwrap();
        assert_eq!(
            sb,
            Superblock {
                block_size: 1024,
                blocks: 65536
            }
        );
        assert_eq!(sb.bytes(), 64 << 20);
        let big = parse_superblock(&superblock((1 << 32) + 5, 2, true)).unwrap();
        assert_eq!(big.blocks, (1 << 32) + 5);
        assert_eq!(big.block_size, 4096);
    }

    #[test]
    fn blank_or_foreign_data_has_no_superblock() {
        assert_eq!(parse_superblock(&[0u8; SUPERBLOCK_LEN]), None);
        assert_eq!(parse_superblock(&[0u8; 10]), None);
        let mut odd = superblock(1, 0, false);
        odd[0x18] = 40;
        assert_eq!(parse_superblock(&odd), None);
    }

    #[test]
    fn a_blank_disk_is_formatted_and_a_grown_one_grown() {
        let sb = |blocks| {
            Some(Superblock {
                block_size: 4096,
                blocks,
            })
        };
        assert_eq!(plan(None, 64 << 20), FilesystemStep::Format);
        assert_eq!(plan(sb(16384), 64 << 20), FilesystemStep::Ready);
        assert_eq!(
            plan(sb(16384), 128 << 20),
            FilesystemStep::Grow {
                from: 64 << 20,
                to: 128 << 20
            }
        );
        // Less than a block more: nothing to grow into.
        assert_eq!(plan(sb(16384), (64 << 20) + 100), FilesystemStep::Ready);
    }

    /// The real tools on a real (sparse) image: format, grow the file, grow
    /// the filesystem. Skipped where e2fsprogs is not installed.
    #[test]
    fn formats_and_grows_a_real_image() {
        if Command::new("mkfs.ext4").arg("-V").output().is_err() {
            eprintln!("mkfs.ext4 not installed: skipped");
            return;
        }
        let dir = tempfile::tempdir().unwrap();
        let image = dir.path().join("disk.img");
        let file = std::fs::File::create(&image).unwrap();
        file.set_len(16 << 20).unwrap();
        assert_eq!(read_superblock(&image).unwrap(), None);
        format(&image).unwrap();
        let made = read_superblock(&image).unwrap().unwrap();
        assert_eq!(made.bytes(), 16 << 20);
        file.set_len(32 << 20).unwrap();
        assert!(matches!(
            plan(Some(made), 32 << 20),
            FilesystemStep::Grow { .. }
        ));
        grow(&image).unwrap();
        assert_eq!(read_superblock(&image).unwrap().unwrap().bytes(), 32 << 20);
    }
}
