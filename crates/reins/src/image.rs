//! Images in a conversation: PNG, JPEG, GIF and WebP, recognized by their magic bytes, their dimensions
//! read from the header bytes (no decoding), a size cap, and what each API counts them as.
//!
//! An [`Image`] is immutable and shared (`Arc`); it is identified by the SHA-256 of its bytes. Its JSON form
//! (the transcript contract) is `{"media_type", "width", "height", "sha256", "data"}` with the bytes in
//! standard base64; reading it back checks the bytes again (format, size, dimensions) and that `sha256`,
//! when given, matches them.

use std::sync::Arc;

use base64::Engine;
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use sha2::Digest;

/// The largest image accepted: 5 MiB (what every supported API takes for one image).
pub const MAX_IMAGE_BYTES: usize = 5 << 20;

/// An image format Reins recognizes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ImageFormat {
    /// PNG.
    Png,
    /// JPEG.
    Jpeg,
    /// GIF (87a or 89a).
    Gif,
    /// WebP (lossy, lossless or extended).
    Webp,
}

impl ImageFormat {
    /// The MIME type: `image/png`, `image/jpeg`, `image/gif` or `image/webp`.
    pub fn media_type(&self) -> &'static str {
        match self {
            ImageFormat::Png => "image/png",
            ImageFormat::Jpeg => "image/jpeg",
            ImageFormat::Gif => "image/gif",
            ImageFormat::Webp => "image/webp",
        }
    }

    /// The format named by a MIME type.
    pub fn from_media_type(media_type: &str) -> Option<Self> {
        match media_type.trim().to_ascii_lowercase().as_str() {
            "image/png" => Some(ImageFormat::Png),
            "image/jpeg" | "image/jpg" => Some(ImageFormat::Jpeg),
            "image/gif" => Some(ImageFormat::Gif),
            "image/webp" => Some(ImageFormat::Webp),
            _ => None,
        }
    }

    /// The format of `bytes`, by their magic bytes.
    ///
    /// ```
    /// assert_eq!(reins::ImageFormat::sniff(b"GIF89a\x01\x00\x01\x00"), Some(reins::ImageFormat::Gif));
    /// assert_eq!(reins::ImageFormat::sniff(b"hello"), None);
    /// ```
    pub fn sniff(bytes: &[u8]) -> Option<Self> {
        if bytes.starts_with(b"\x89PNG\r\n\x1a\n") {
            Some(ImageFormat::Png)
        } else if bytes.starts_with(&[0xff, 0xd8, 0xff]) {
            Some(ImageFormat::Jpeg)
        } else if bytes.starts_with(b"GIF87a") || bytes.starts_with(b"GIF89a") {
            Some(ImageFormat::Gif)
        } else if bytes.len() >= 12 && &bytes[..4] == b"RIFF" && &bytes[8..12] == b"WEBP" {
            Some(ImageFormat::Webp)
        } else {
            None
        }
    }
}

/// Why bytes are not an image Reins takes.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ImageError {
    /// Not PNG, JPEG, GIF or WebP.
    #[error("not a PNG, JPEG, GIF or WebP image")]
    UnknownFormat,
    /// Over [`MAX_IMAGE_BYTES`].
    #[error("the image is {size} bytes, more than the {max} bytes an image may have")]
    TooLarge {
        /// Its size.
        size: usize,
        /// The cap.
        max: usize,
    },
    /// The header is cut short or inconsistent.
    #[error("a malformed {format} header: {reason}")]
    Malformed {
        /// The format the magic bytes said.
        format: &'static str,
        /// What is wrong.
        reason: &'static str,
    },
    /// The JSON form is not an image.
    #[error("{0}")]
    Invalid(String),
}

/// The width and height a header declares, read without decoding the image.
///
/// ```
/// let gif = b"GIF89a\x0a\x00\x05\x00\x00\x00\x00";
/// assert_eq!(reins::image::dimensions(gif), Ok((reins::ImageFormat::Gif, 10, 5)));
/// ```
pub fn dimensions(bytes: &[u8]) -> Result<(ImageFormat, u32, u32), ImageError> {
    let format = ImageFormat::sniff(bytes).ok_or(ImageError::UnknownFormat)?;
    let bad = |reason| ImageError::Malformed { format: format.media_type(), reason };
    let be16 = |i: usize| bytes.get(i..i + 2).map(|b| u32::from(u16::from_be_bytes([b[0], b[1]])));
    let le16 = |i: usize| bytes.get(i..i + 2).map(|b| u32::from(u16::from_le_bytes([b[0], b[1]])));
    let (w, h) = match format {
        ImageFormat::Png => {
            if bytes.get(12..16) != Some(b"IHDR") {
                return Err(bad("the first chunk is not IHDR"));
            }
            let w = bytes.get(16..20).ok_or(bad("cut short"))?;
            let h = bytes.get(20..24).ok_or(bad("cut short"))?;
            (u32::from_be_bytes([w[0], w[1], w[2], w[3]]), u32::from_be_bytes([h[0], h[1], h[2], h[3]]))
        }
        ImageFormat::Gif => (le16(6).ok_or(bad("cut short"))?, le16(8).ok_or(bad("cut short"))?),
        ImageFormat::Webp => match bytes.get(12..16) {
            Some(b"VP8 ") => {
                if bytes.get(23..26) != Some(&[0x9d, 0x01, 0x2a]) {
                    return Err(bad("no VP8 start code"));
                }
                (le16(26).ok_or(bad("cut short"))? & 0x3fff, le16(28).ok_or(bad("cut short"))? & 0x3fff)
            }
            Some(b"VP8L") => {
                let b = bytes.get(20..25).ok_or(bad("cut short"))?;
                if b[0] != 0x2f {
                    return Err(bad("no VP8L signature"));
                }
                let bits = u32::from_le_bytes([b[1], b[2], b[3], b[4]]);
                ((bits & 0x3fff) + 1, ((bits >> 14) & 0x3fff) + 1)
            }
            Some(b"VP8X") => {
                let b = bytes.get(24..30).ok_or(bad("cut short"))?;
                let w = u32::from_le_bytes([b[0], b[1], b[2], 0]) + 1;
                let h = u32::from_le_bytes([b[3], b[4], b[5], 0]) + 1;
                (w, h)
            }
            _ => return Err(bad("an unknown first chunk")),
        },
        ImageFormat::Jpeg => jpeg_size(bytes, be16).ok_or(bad("no frame header"))?,
    };
    if w == 0 || h == 0 {
        return Err(bad("a zero width or height"));
    }
    Ok((format, w, h))
}

/// Walks the JPEG markers to the first start-of-frame and reads its height and width.
fn jpeg_size(bytes: &[u8], be16: impl Fn(usize) -> Option<u32>) -> Option<(u32, u32)> {
    let mut i = 2;
    while i + 1 < bytes.len() {
        if bytes[i] != 0xff {
            return None;
        }
        let marker = bytes[i + 1];
        if marker == 0xff {
            // Fill byte.
            i += 1;
            continue;
        }
        if marker == 0x01 || (0xd0..=0xd7).contains(&marker) {
            i += 2;
            continue;
        }
        if marker == 0xd9 || marker == 0xda {
            return None;
        }
        let len = be16(i + 2)? as usize;
        if len < 2 {
            return None;
        }
        let sof = (0xc0..=0xcf).contains(&marker) && !matches!(marker, 0xc4 | 0xc8 | 0xcc);
        if sof {
            let h = be16(i + 5)?;
            let w = be16(i + 7)?;
            return Some((w, h));
        }
        i = i.checked_add(2 + len)?;
    }
    None
}

/// How an API counts an image in its context.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ImageCost {
    /// OpenAI (high detail): scaled to fit 2048×2048, then its shortest side to at most 768 px; 85 tokens plus
    /// 170 per 512-px tile.
    #[default]
    OpenAiTiles,
    /// Anthropic: scaled so its long edge is at most 1568 px; width × height / 750 tokens, at most 1600.
    Anthropic,
}

impl ImageCost {
    /// The tokens an image of `width` × `height` costs.
    ///
    /// ```
    /// use reins::image::ImageCost;
    /// assert_eq!(ImageCost::OpenAiTiles.tokens(1024, 1024), 85 + 170 * 4);
    /// assert_eq!(ImageCost::Anthropic.tokens(1000, 1000), 1334);
    /// ```
    pub fn tokens(&self, width: u32, height: u32) -> u64 {
        let (mut w, mut h) = (f64::from(width.max(1)), f64::from(height.max(1)));
        match self {
            ImageCost::OpenAiTiles => {
                let fit = (2048.0 / w.max(h)).min(1.0);
                (w, h) = (w * fit, h * fit);
                let short = (768.0 / w.min(h)).min(1.0);
                (w, h) = (w * short, h * short);
                let tiles = (w / 512.0).ceil() * (h / 512.0).ceil();
                85 + 170 * tiles as u64
            }
            ImageCost::Anthropic => {
                let fit = (1568.0 / w.max(h)).min(1.0);
                (w, h) = (w * fit, h * fit);
                ((w * h / 750.0).ceil() as u64).min(1600)
            }
        }
    }
}

/// An image of a message: its bytes (shared), format, dimensions and SHA-256.
#[derive(Clone, PartialEq, Eq)]
pub struct Image {
    format: ImageFormat,
    width: u32,
    height: u32,
    sha256: Arc<str>,
    data: Arc<[u8]>,
}

impl std::fmt::Debug for Image {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "Image({} {}x{}, {} bytes, {})",
            self.format.media_type(),
            self.width,
            self.height,
            self.data.len(),
            &self.sha256[..12]
        )
    }
}

impl Image {
    /// An image from its bytes: the format by magic bytes, at most [`MAX_IMAGE_BYTES`], dimensions from the
    /// header.
    pub fn from_bytes(data: impl Into<Arc<[u8]>>) -> Result<Image, ImageError> {
        let data: Arc<[u8]> = data.into();
        if data.len() > MAX_IMAGE_BYTES {
            return Err(ImageError::TooLarge { size: data.len(), max: MAX_IMAGE_BYTES });
        }
        let (format, width, height) = dimensions(&data)?;
        let sha256 = hex(&sha2::Sha256::digest(&data));
        Ok(Image { format, width, height, sha256: Arc::from(sha256), data })
    }

    /// An image from standard base64 text.
    pub fn from_base64(text: &str) -> Result<Image, ImageError> {
        if text.len() > MAX_IMAGE_BYTES.div_ceil(3) * 4 + 4 {
            return Err(ImageError::TooLarge { size: text.len() / 4 * 3, max: MAX_IMAGE_BYTES });
        }
        let bytes = base64::engine::general_purpose::STANDARD
            .decode(text.trim())
            .map_err(|e| ImageError::Invalid(format!("the image data is not base64: {e}")))?;
        Image::from_bytes(bytes)
    }

    /// Its format.
    pub fn format(&self) -> ImageFormat {
        self.format
    }

    /// Its MIME type.
    pub fn media_type(&self) -> &'static str {
        self.format.media_type()
    }

    /// Its width in pixels.
    pub fn width(&self) -> u32 {
        self.width
    }

    /// Its height in pixels.
    pub fn height(&self) -> u32 {
        self.height
    }

    /// The SHA-256 of its bytes, as lowercase hex: its identity.
    pub fn sha256(&self) -> &str {
        &self.sha256
    }

    /// Its bytes.
    pub fn data(&self) -> &[u8] {
        &self.data
    }

    /// Its bytes in standard base64.
    pub fn base64(&self) -> String {
        base64::engine::general_purpose::STANDARD.encode(&self.data)
    }

    /// A `data:` URL of it.
    pub fn data_url(&self) -> String {
        format!("data:{};base64,{}", self.media_type(), self.base64())
    }

    /// What it costs in tokens under `cost`.
    pub fn tokens(&self, cost: ImageCost) -> u64 {
        cost.tokens(self.width, self.height)
    }
}

fn hex(bytes: &[u8]) -> String {
    use std::fmt::Write;
    bytes.iter().fold(String::with_capacity(bytes.len() * 2), |mut s, b| {
        let _ = write!(s, "{b:02x}");
        s
    })
}

#[derive(Serialize)]
struct ImageOut<'a> {
    media_type: &'static str,
    width: u32,
    height: u32,
    sha256: &'a str,
    data: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ImageIn {
    #[serde(default)]
    media_type: Option<String>,
    #[serde(default)]
    width: Option<u32>,
    #[serde(default)]
    height: Option<u32>,
    #[serde(default)]
    sha256: Option<String>,
    data: String,
}

impl Serialize for Image {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        ImageOut {
            media_type: self.media_type(),
            width: self.width,
            height: self.height,
            sha256: &self.sha256,
            data: self.base64(),
        }
        .serialize(s)
    }
}

impl<'de> Deserialize<'de> for Image {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        use serde::de::Error;
        let raw = ImageIn::deserialize(d)?;
        let image = Image::from_base64(&raw.data).map_err(D::Error::custom)?;
        if let Some(sha) = &raw.sha256 {
            if !sha.eq_ignore_ascii_case(&image.sha256) {
                return Err(D::Error::custom(format!("the image's sha256 {sha} does not match its data")));
            }
        }
        if let Some(m) = &raw.media_type {
            if ImageFormat::from_media_type(m) != Some(image.format) {
                return Err(D::Error::custom(format!("the image's media_type {m} does not match its data")));
            }
        }
        if raw.width.is_some_and(|w| w != image.width) || raw.height.is_some_and(|h| h != image.height) {
            return Err(D::Error::custom("the image's width and height do not match its data"));
        }
        Ok(image)
    }
}
