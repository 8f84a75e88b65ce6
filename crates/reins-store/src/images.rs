//! Images in the log, stored once per session by content: the first transcript item that holds an image is
//! preceded by an `image` entry `{"sha256", "media_type", "data"}` (the bytes in base64), and every item
//! records its images as references (`{"media_type", "width", "height", "sha256"}`, no data). Reading a
//! session back puts the data into the references again.

use std::collections::{HashMap, HashSet};

use reins::{Image, Message};
use serde_json::Value;

use crate::chunk::Chunk;
use crate::session::kind;

/// The image entry of `image`.
fn entry(image: &Image) -> Value {
    serde_json::json!({"sha256": image.sha256(), "media_type": image.media_type(), "data": image.base64()})
}

/// The item with its images' data left out (they are in the session's image entries).
fn reference(message: &Message) -> serde_json::Result<Value> {
    let mut v = serde_json::to_value(message)?;
    if let Some(images) = v.get_mut("images").and_then(Value::as_array_mut) {
        for i in images.iter_mut().filter_map(Value::as_object_mut) {
            i.remove("data");
        }
    }
    Ok(v)
}

/// Appends transcript item `index` to `chunk`: the entries of the images the session does not hold yet
/// (`seen`: the SHA-256s it holds), then the item with references. An item without images is written as is.
pub(crate) fn push_message(
    chunk: &mut Chunk,
    seen: &mut HashSet<String>,
    index: usize,
    message: &Message,
) -> Result<(), String> {
    if message.images().is_empty() {
        return chunk.push(kind::MESSAGE, Some(index), |out| serde_json::to_writer(out, message));
    }
    for image in message.images() {
        if seen.insert(image.sha256().to_owned()) {
            let e = entry(image);
            chunk.push(kind::IMAGE, None, |out| serde_json::to_writer(out, &e))?;
        }
    }
    let item = reference(message).map_err(|e| e.to_string())?;
    chunk.push(kind::MESSAGE, Some(index), |out| serde_json::to_writer(out, &item))
}

/// The SHA-256s of the images in `messages`.
pub(crate) fn held(messages: &[Message]) -> HashSet<String> {
    messages.iter().flat_map(|m| m.images()).map(|i| i.sha256().to_owned()).collect()
}

/// The base64 data of each recorded image, by SHA-256.
pub(crate) fn data_of<'a>(entries: impl Iterator<Item = &'a Value>) -> HashMap<&'a str, &'a str> {
    entries.filter_map(|v| Some((v.get("sha256")?.as_str()?, v.get("data")?.as_str()?))).collect()
}

/// Puts the data of each referenced image of a recorded item back. A reference to an image the session does
/// not hold is an error.
pub(crate) fn resolve(item: &mut Value, data: &HashMap<&str, &str>) -> Result<(), String> {
    let Some(images) = item.get_mut("images").and_then(Value::as_array_mut) else { return Ok(()) };
    for i in images.iter_mut().filter_map(Value::as_object_mut) {
        if i.contains_key("data") {
            continue;
        }
        let sha = i.get("sha256").and_then(Value::as_str).unwrap_or_default();
        let Some(d) = data.get(sha) else { return Err(format!("image {sha:?} is not in the session")) };
        i.insert("data".into(), Value::String((*d).to_owned()));
    }
    Ok(())
}
