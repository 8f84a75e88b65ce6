//! `read_file` shows an image file as an image: opened beneath the root like every file (regular only,
//! bounded by the image cap), recognized by its bytes whatever its name; a file that only starts like an
//! image, or a line range of one, is refused with the reason.

use std::fs;
use std::sync::Arc;

use reins::{Registry, ToolContext, ToolOutput};
use reins_tools::{RelPath, Workspace, file_tools};
use serde_json::json;
use tokio_util::sync::CancellationToken;

const PNG_1X1: &str =
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg==";

fn png_bytes() -> Vec<u8> {
    reins::Image::from_base64(PNG_1X1).unwrap().data().to_vec()
}

async fn read(registry: &Registry, args: serde_json::Value) -> Result<ToolOutput, reins::ToolError> {
    let tool = registry.check("read_file", &args).expect("valid call");
    tool.call(args, ToolContext::new("1", CancellationToken::new())).await
}

#[tokio::test]
async fn read_file_returns_an_image_as_an_image() {
    let tmp = tempfile::tempdir().unwrap();
    fs::write(tmp.path().join("shot.png"), png_bytes()).unwrap();
    // The name does not matter: the bytes do.
    fs::write(tmp.path().join("shot.dat"), png_bytes()).unwrap();
    fs::write(tmp.path().join("fake.png"), b"\x89PNG\r\n\x1a\nnot really").unwrap();
    fs::write(tmp.path().join("notes.txt"), "plain text\n").unwrap();
    let mut big = png_bytes();
    big.resize(reins::MAX_IMAGE_BYTES + 1, 0);
    fs::write(tmp.path().join("big.png"), big).unwrap();
    let ws = Arc::new(Workspace::open(tmp.path()).unwrap());
    let registry = Registry::new(file_tools(ws.clone())).unwrap();

    for name in ["shot.png", "shot.dat"] {
        let out = read(&registry, json!({"path": name})).await.unwrap();
        let ToolOutput::Parts { text, images } = out else { panic!("{name}: {out:?}") };
        assert_eq!(images.len(), 1);
        assert_eq!((images[0].media_type(), images[0].width(), images[0].height()), ("image/png", 1, 1));
        assert!(text.contains("image/png") && text.contains("1x1"), "{text}");
    }
    assert_eq!(read(&registry, json!({"path": "notes.txt"})).await.unwrap(), ToolOutput::Text("plain text\n".into()));
    let e = read(&registry, json!({"path": "fake.png"})).await.unwrap_err().to_string();
    assert!(e.contains("cannot be shown as an image"), "{e}");
    let e = read(&registry, json!({"path": "big.png"})).await.unwrap_err().to_string();
    assert!(e.contains("read limit"), "{e}");
    // A line range reads text: an image is binary.
    let e = read(&registry, json!({"path": "shot.png", "start_line": 1})).await.unwrap_err().to_string();
    assert!(e.contains("binary"), "{e}");
    // Special files are refused before a byte is read.
    assert!(ws.read_image(&RelPath::parse(".").unwrap()).is_err());
}
