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
    assert_eq!((images[0]["media_type"].as_str(), images[0]["data"].as_str()), (Some("image/png"), Some(PNG_1X1)));
    assert_eq!((images[1]["media_type"].as_str(), images[1]["width"].as_u64()), (Some("image/gif"), Some(3)));
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
