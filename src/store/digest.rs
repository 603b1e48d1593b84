//! The content digest recorded with every version (`versions.blake3`, the
//! `user.scratchfs.blake3` xattr, checked by `fsck`): a pure function of the content's
//! bytes, computable in time proportional to the bytes that are not holes.
//!
//! - Content of at most [`BLOCK_FORM_FROM`] bytes (1 GiB): the plain blake3 of the bytes,
//!   64 hex digits, as `b3sum` prints it. Holes are hashed as the zeros they read as
//!   (at most 1 GiB of them).
//! - Larger content: `b3m:` and 64 hex digits, the blake3 (in `derive_key` mode, context
//!   [`BLOCK_CONTEXT`]) of, for every 1 MiB block (offset-aligned, the last one possibly
//!   short) that holds a byte other than zero, the block's index (u64 little-endian) and
//!   the blake3 of its bytes, followed by the content's length (u64 little-endian). A
//!   block of zeros contributes nothing, whether it is a hole or written zeros, so a
//!   1 TiB sparse file is digested in microseconds and the same bytes always give the
//!   same digest however they were stored.
//!
//! The form is chosen by the content's length alone, which a commit knows before it
//! writes a byte (docs/schema.md, "Content model").

/// Content longer than this many bytes (1 GiB) gets the block form.
pub const BLOCK_FORM_FROM: u64 = 1 << 30;

/// Block size of the block form, bytes (1 MiB).
pub const BLOCK: u64 = 1 << 20;

/// `derive_key` context of the block form's outer hash.
pub const BLOCK_CONTEXT: &str = "scratchfs 2026-12-01 content digest, 1 MiB blocks";

/// Prefix of the block form's text.
pub const BLOCK_PREFIX: &str = "b3m:";

/// Zeros fed at once (a static buffer: holes never allocate).
static ZEROS: [u8; 64 * 1024] = [0; 64 * 1024];

/// Streaming digest of content whose final length is known in advance. Feed the bytes in
/// order with [`ContentHasher::update`] and holes with [`ContentHasher::zeros`].
#[derive(Clone)]
pub struct ContentHasher {
    /// Final length, bytes (decides the form).
    len: u64,
    /// Bytes fed so far.
    pos: u64,
    form: Form,
}

#[derive(Clone)]
enum Form {
    Plain(blake3::Hasher),
    Blocks {
        outer: blake3::Hasher,
        block: blake3::Hasher,
        /// Some byte of the current block is not zero.
        nonzero: bool,
    },
}

impl ContentHasher {
    /// A digest of content that will be `len` bytes long.
    pub fn new(len: u64) -> ContentHasher {
        let form = if len > BLOCK_FORM_FROM {
            Form::Blocks {
                outer: blake3::Hasher::new_derive_key(BLOCK_CONTEXT),
                block: blake3::Hasher::new(),
                nonzero: false,
            }
        } else {
            Form::Plain(blake3::Hasher::new())
        };
        ContentHasher { len, pos: 0, form }
    }

    /// The length the digest was made for, bytes.
    pub fn len(&self) -> u64 {
        self.len
    }

    /// Bytes fed so far.
    pub fn position(&self) -> u64 {
        self.pos
    }

    /// Whether nothing was fed yet.
    pub fn is_empty(&self) -> bool {
        self.pos == 0
    }

    /// The same state for content that will be `len` bytes long, if the bytes fed so far
    /// hash the same way for that length (both lengths in the same form); `None` if the
    /// prefix must be hashed again.
    pub fn resized(&self, len: u64) -> Option<ContentHasher> {
        ((len > BLOCK_FORM_FROM) == (self.len > BLOCK_FORM_FROM)).then(|| ContentHasher {
            len,
            pos: self.pos,
            form: self.form.clone(),
        })
    }

    /// Feeds the next bytes.
    pub fn update(&mut self, mut data: &[u8]) {
        match &mut self.form {
            Form::Plain(h) => {
                h.update(data);
                self.pos += data.len() as u64;
            }
            Form::Blocks { .. } => {
                while !data.is_empty() {
                    let room = (BLOCK - self.pos % BLOCK) as usize;
                    let (piece, rest) = data.split_at(room.min(data.len()));
                    if let Form::Blocks { block, nonzero, .. } = &mut self.form {
                        block.update(piece);
                        *nonzero |= piece.iter().any(|&b| b != 0);
                    }
                    self.pos += piece.len() as u64;
                    if self.pos.is_multiple_of(BLOCK) {
                        self.end_block(self.pos / BLOCK - 1);
                    }
                    data = rest;
                }
            }
        }
    }

    /// Feeds `n` zero bytes (a hole): O(1) per whole block of the block form.
    pub fn zeros(&mut self, mut n: u64) {
        while n > 0 {
            if matches!(self.form, Form::Blocks { .. })
                && self.pos.is_multiple_of(BLOCK)
                && n >= BLOCK
            {
                // Whole blocks of zeros contribute nothing.
                let skip = n - n % BLOCK;
                self.pos += skip;
                n -= skip;
                continue;
            }
            let k = n.min(ZEROS.len() as u64);
            let k = match self.form {
                Form::Blocks { .. } => k.min(BLOCK - self.pos % BLOCK),
                Form::Plain(_) => k,
            };
            self.update(&ZEROS[..k as usize]);
            n -= k;
        }
    }

    fn end_block(&mut self, index: u64) {
        if let Form::Blocks {
            outer,
            block,
            nonzero,
        } = &mut self.form
        {
            if *nonzero {
                outer.update(&index.to_le_bytes());
                outer.update(block.finalize().as_bytes());
            }
            *block = blake3::Hasher::new();
            *nonzero = false;
        }
    }

    /// The digest's text (see the module docs). Feeds zeros up to the length first if
    /// fewer bytes were fed.
    pub fn finalize(&self) -> String {
        let mut h = self.clone();
        if h.pos < h.len {
            h.zeros(h.len - h.pos);
        }
        match &h.form {
            Form::Plain(p) => p.finalize().to_hex().to_string(),
            Form::Blocks { .. } => {
                if !h.pos.is_multiple_of(BLOCK) {
                    h.end_block(h.pos / BLOCK);
                }
                let Form::Blocks { outer, .. } = &mut h.form else {
                    unreachable!()
                };
                outer.update(&h.len.to_le_bytes());
                format!("{BLOCK_PREFIX}{}", outer.finalize().to_hex())
            }
        }
    }
}

/// The digest of `data` (a whole content held in memory).
pub fn of_bytes(data: &[u8]) -> String {
    let mut h = ContentHasher::new(data.len() as u64);
    h.update(data);
    h.finalize()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn small_content_is_plain_blake3() {
        assert_eq!(
            of_bytes(b"hello"),
            blake3::hash(b"hello").to_hex().to_string()
        );
        let mut h = ContentHasher::new(10);
        h.update(b"ab");
        h.zeros(8);
        let mut v = b"ab".to_vec();
        v.resize(10, 0);
        assert_eq!(h.finalize(), blake3::hash(&v).to_hex().to_string());
    }

    #[test]
    fn block_form_is_a_function_of_the_bytes_whatever_their_holes() {
        let len = BLOCK_FORM_FROM + 3 * BLOCK + 17;
        // Data in block 1 (partly) and at the very end; written as holes + data ...
        let mut a = ContentHasher::new(len);
        a.zeros(BLOCK + 5);
        a.update(b"xyz");
        a.zeros(len - (BLOCK + 8) - 1);
        a.update(b"!");
        // ... and with the zeros around the data written out in odd pieces.
        let mut b = ContentHasher::new(len);
        b.zeros(BLOCK - 100);
        b.update(&[0u8; 105]);
        b.update(b"xy");
        b.update(b"z");
        b.update(&vec![0u8; 3 * BLOCK as usize]);
        b.zeros(len - b.position() - 1);
        b.update(b"!");
        assert_eq!(a.position(), len);
        assert_eq!(a.finalize(), b.finalize());
        assert!(a.finalize().starts_with(BLOCK_PREFIX));
        // A different byte, or only a different length, gives another digest.
        let mut c = a.clone();
        c.len += 1;
        assert_ne!(a.finalize(), c.finalize());
        let mut d = ContentHasher::new(len);
        d.zeros(BLOCK + 5);
        d.update(b"xyZ");
        assert_ne!(a.finalize(), {
            d.zeros(len - d.position() - 1);
            d.update(b"!");
            d.finalize()
        });
    }

    #[test]
    fn a_terabyte_of_holes_is_digested_at_once() {
        let mut h = ContentHasher::new(1 << 40);
        h.zeros(1 << 40);
        let t = std::time::Instant::now();
        let d = h.finalize();
        assert!(d.starts_with(BLOCK_PREFIX));
        // Not a timing assertion: the zero-block path must not have fed 1 TiB.
        assert_eq!(h.position(), 1 << 40);
        let _ = t;
    }
}
