//! `reins run --image FILE` through the real binary: the images join the prompt (in the transcript and the
//! outcome), never the events; bad files are refused by the flag.

use serde_json::{Value, json};

mod common;
use common::{Dir, reins};

const PNG_1X1: &str =
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg==";

fn png_bytes() -> Vec<u8> {
    reins::Image::from_base64(PNG_1X1).unwrap().data().to_vec()
}

#[test]
fn images_join_the_prompt_and_never_the_events() {
    let dir = Dir::new("images-ok");
    let png = dir.0.join("a.png");
    std::fs::write(&png, png_bytes()).unwrap();
    let gif = dir.0.join("b");
    std::fs::write(&gif, b"GIF89a\x03\x00\x02\x00\x00\x00\x00;").unwrap();
    let script = dir.file("script.json", &json!([{"content": "two pictures"}]).to_string());
    let out_file = dir.0.join("o.json");
    let out = reins()
        .args(["run", "--no-store", "--json", "--events-content", "--model"])
        .arg(format!("script:{}", script.display()))
        .args(["--image", png.to_str().unwrap(), "--image", gif.to_str().unwrap()])
        .args(["--output", out_file.to_str().unwrap(), "what are these?"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    let o: Value = serde_json::from_str(&std::fs::read_to_string(&out_file).unwrap()).unwrap();
    let images = o["messages"][0]["images"].as_array().unwrap();
    assert_eq!(images.len(), 2);
    assert_eq!((images[0]["media_type"].as_str(), images[1]["width"].as_u64()), (Some("image/png"), Some(3)));
    assert_eq!(images[1]["media_type"].as_str(), Some("image/gif"));
    // The messages refer to the images by SHA-256; their bytes are in the outcome's `images`, each once.
    assert!(images.iter().all(|i| i.get("data").is_none() && i["sha256"].is_string()), "{images:?}");
    let stored = o["images"].as_array().unwrap();
    assert_eq!(stored.len(), 2);
    assert_eq!(stored[0]["sha256"], images[0]["sha256"]);
    assert_eq!((stored[0]["media_type"].as_str(), stored[0]["data"].as_str()), (Some("image/png"), Some(PNG_1X1)));
    let events = String::from_utf8_lossy(&out.stdout);
    assert!(events.contains("what are these?"), "the prompt is there with --events-content");
    assert!(!events.contains(PNG_1X1) && !events.contains("sha256"), "no image in events: {events}");
}

#[test]
fn bad_image_files_are_refused_by_the_flag() {
    let dir = Dir::new("images-bad");
    let script = dir.file("script.json", &json!([{"content": "x"}]).to_string());
    let text = dir.file("notes.txt", "not an image");
    let cut = dir.0.join("cut.png");
    std::fs::write(&cut, &png_bytes()[..14]).unwrap();
    let big = dir.0.join("big.gif");
    let mut bytes = b"GIF89a\x01\x00\x01\x00".to_vec();
    bytes.resize(reins::MAX_IMAGE_BYTES + 1, 0);
    std::fs::write(&big, bytes).unwrap();
    for (path, says) in [
        (text.to_str().unwrap(), "not a PNG, JPEG, GIF or WebP image"),
        (cut.to_str().unwrap(), "malformed image/png header"),
        (big.to_str().unwrap(), "larger than 5 MiB"),
        ("/dev/zero", "not a regular file"),
        (dir.0.to_str().unwrap(), "not a regular file"),
        ("/nonexistent/x.png", "No such file"),
    ] {
        let out = reins()
            .args(["run", "--no-store", "--model"])
            .arg(format!("script:{}", script.display()))
            .args(["--image", path, "go"])
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{path}: {err}");
        assert!(err.contains("--image") && err.contains(says), "{path}: {err}");
    }
    let png = dir.0.join("a.png");
    std::fs::write(&png, png_bytes()).unwrap();
    let out =
        reins().args(["run", "--no-store", "--resume", "abc", "--image", png.to_str().unwrap()]).output().unwrap();
    assert_eq!(out.status.code(), Some(2), "{}", String::from_utf8_lossy(&out.stderr));
}

/// A GIF of `size` bytes (a valid header, then padding).
fn gif_of(size: usize) -> Vec<u8> {
    let mut bytes = b"GIF89a\x01\x00\x01\x00".to_vec();
    bytes.resize(size, 0);
    bytes
}

/// More than 20 images, or more than 20 MiB of them in all, are refused by the flag (exit 2) before any model
/// call: the model here is a server that is not there, which a call would make exit 8.
#[test]
fn too_many_images_or_too_many_bytes_are_refused_before_the_model_is_called() {
    let dir = Dir::new("images-caps");
    let png = dir.0.join("a.png");
    std::fs::write(&png, png_bytes()).unwrap();
    let big = dir.0.join("big.gif");
    std::fs::write(&big, gif_of(4_500_000)).unwrap();
    let many: Vec<String> = (0..21).flat_map(|_| ["--image".to_owned(), png.display().to_string()]).collect();
    let heavy: Vec<String> = (0..5).flat_map(|_| ["--image".to_owned(), big.display().to_string()]).collect();
    for (args, says) in [(many, "at most 20 images a run (21 given)"), (heavy, "more than 20 MiB in all")] {
        let out = reins()
            .args(["run", "--no-store", "--model", "openai-chat:x", "--base-url", "http://127.0.0.1:9/v1"])
            .env("OPENAI_API_KEY", "sk-test")
            .args(&args)
            .arg("go")
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{err}");
        assert!(err.contains("--image") && err.contains(says), "{err}");
    }
    // Twenty, and four of 4.5 MB, are taken.
    let script = dir.file("script.json", &json!([{"content": "seen"}]).to_string());
    let twenty: Vec<String> = (0..20).flat_map(|_| ["--image".to_owned(), png.display().to_string()]).collect();
    let four: Vec<String> = (0..4).flat_map(|_| ["--image".to_owned(), big.display().to_string()]).collect();
    for args in [twenty, four] {
        let out = reins()
            .args(["run", "--no-store", "--model"])
            .arg(format!("script:{}", script.display()))
            .args(&args)
            .arg("go")
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    }
}

/// The same image shown many times (here twenty times in the prompt, then again by a tool) is in the outcome file
/// once: the file grows by references, not by copies.
#[test]
fn the_outcome_file_holds_each_image_once() {
    let dir = Dir::new("images-once");
    let ws = dir.0.join("ws");
    std::fs::create_dir_all(&ws).unwrap();
    let big = ws.join("big.gif");
    std::fs::write(&big, gif_of(1_000_000)).unwrap();
    let script = json!([
        {"tool_calls": [{"id": "1", "name": "read_file", "arguments": {"path": "big.gif"}}]},
        {"content": "the same picture"}
    ]);
    let script = dir.file("script.json", &script.to_string());
    let out_file = dir.0.join("o.json");
    let images: Vec<String> = (0..20).flat_map(|_| ["--image".to_owned(), big.display().to_string()]).collect();
    let out = reins()
        .args(["run", "--no-store", "--model"])
        .arg(format!("script:{}", script.display()))
        .arg("--workspace")
        .arg(&ws)
        .args(&images)
        .args(["--output", out_file.to_str().unwrap(), "twenty times the same"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    let size = std::fs::metadata(&out_file).unwrap().len();
    // One copy in base64 is 1.33 MB; twenty-one would be 28 MB.
    assert!(size < 1_500_000, "the outcome file is {size} bytes");
    let o: Value = serde_json::from_str(&std::fs::read_to_string(&out_file).unwrap()).unwrap();
    let stored = o["images"].as_array().unwrap();
    assert_eq!(stored.len(), 1);
    let sha = stored[0]["sha256"].as_str().unwrap();
    let shown = o["messages"][0]["images"].as_array().unwrap();
    assert_eq!(shown.len(), 20);
    assert!(shown.iter().all(|i| i["sha256"] == sha && i.get("data").is_none()));
    let tool = o["messages"].as_array().unwrap().iter().find(|m| m["role"] == "tool").unwrap();
    assert_eq!(tool["images"][0]["sha256"], sha, "{tool}");
    // A run without images has no `images` key.
    let plain = dir.file("plain.json", &json!([{"content": "no pictures"}]).to_string());
    let out = reins()
        .args(["run", "--no-store", "--model"])
        .arg(format!("script:{}", plain.display()))
        .args(["--output", out_file.to_str().unwrap(), "go"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0));
    let o: Value = serde_json::from_str(&std::fs::read_to_string(&out_file).unwrap()).unwrap();
    assert!(o.get("images").is_none(), "{o}");
}
