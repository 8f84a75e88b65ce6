//! Images are stored once per session, by content (SHA-256): an `image` entry before the first item that
//! holds it, references in the items; the transcript reads back exactly, and a resumed run that shows the
//! same image again stores nothing new.

mod common;

use common::{TempDir, rt};
use reins::{Agent, FnTool, Image, Message, ModelResponse, Registry, ScriptedModel, Status, ToolCall, ToolOutput};
use reins_store::{SessionMeta, Store, kind};
use tokio_util::sync::CancellationToken;

const PNG_1X1: &str =
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg==";

fn png() -> Image {
    Image::from_base64(PNG_1X1).unwrap()
}

fn gif() -> Image {
    Image::from_bytes(b"GIF89a\x03\x00\x02\x00\x00\x00\x00;".to_vec()).unwrap()
}

fn agent(store: &Store, steps: Vec<ModelResponse>, session: Option<&reins_store::Session>) -> Agent {
    let shot = FnTool::new("shot", "A screenshot.", serde_json::json!({"type": "object"}), |_, _| async {
        Ok(ToolOutput::Parts { text: "the screen".into(), images: vec![png(), gif()] })
    });
    let meta = SessionMeta { model: Some("scripted".into()), workspace: None, prices: None, config: None };
    let journal = match session {
        None => store.journal(meta),
        Some(s) => store.resume_journal(s, meta).unwrap(),
    };
    Agent::builder(ScriptedModel::new(steps))
        .registry(Registry::builder().tool(shot).build().unwrap())
        .journal(journal)
        .build()
        .unwrap()
}

fn image_entries(session: &reins_store::Session) -> Vec<String> {
    session
        .entries
        .iter()
        .filter(|e| e.kind == kind::IMAGE)
        .map(|e| e.data["sha256"].as_str().unwrap().to_owned())
        .collect()
}

#[test]
fn images_are_stored_once_per_session_and_read_back() {
    let dir = TempDir::new("images");
    let store = Store::open(dir.path().join("s.db")).unwrap();
    let a = agent(
        &store,
        vec![
            ModelResponse::tool_calls("", vec![ToolCall::new("1", "shot", serde_json::json!({}))]),
            ModelResponse::tool_calls("", vec![ToolCall::new("2", "shot", serde_json::json!({}))]),
            ModelResponse::text("two screens"),
        ],
        None,
    );
    let outcome = rt().block_on(a.run_with_images("compare", vec![png()], CancellationToken::new()));
    assert_eq!(outcome.status, Status::Completed, "{:?}", outcome.error);
    let id = outcome.session_id.clone().unwrap();
    let session = store.load(&id).unwrap();
    // The PNG (prompt and both results) and the GIF (both results): one entry each.
    let mut shas = image_entries(&session);
    shas.sort();
    let mut want = vec![png().sha256().to_owned(), gif().sha256().to_owned()];
    want.sort();
    assert_eq!(shas, want);
    // The items hold references only.
    for e in session.entries.iter().filter(|e| e.kind == kind::MESSAGE) {
        if let Some(images) = e.data.get("images") {
            assert!(images.as_array().unwrap().iter().all(|i| i.get("data").is_none() && i["sha256"].is_string()));
        }
    }
    assert_eq!(session.messages().unwrap(), outcome.messages);
    assert_eq!(outcome.messages[0].images(), [png()]);
    assert_eq!(outcome.messages[2].images(), [png(), gif()]);

    // A resumed run whose tool shows the same images stores none again.
    let b = agent(
        &store,
        vec![
            ModelResponse::tool_calls("", vec![ToolCall::new("3", "shot", serde_json::json!({}))]),
            ModelResponse::text("same"),
        ],
        Some(&session),
    );
    let state =
        session.resume_state(reins::Limits::default(), &reins::ContextConfig::default(), Some("again")).unwrap();
    let outcome = rt().block_on(b.drive(state, CancellationToken::new()));
    assert_eq!(outcome.status, Status::Completed, "{:?}", outcome.error);
    let session = store.load(&id).unwrap();
    assert_eq!(image_entries(&session).len(), 2);
    let messages = session.messages().unwrap();
    assert_eq!(messages, outcome.messages);
    assert!(matches!(messages.last(), Some(Message::Assistant { .. })));
}

#[test]
fn a_reference_to_an_image_the_session_lacks_is_a_damaged_entry() {
    let mut item =
        serde_json::json!({"role": "user", "content": "x", "images": [{"sha256": "00", "media_type": "image/png"}]});
    let err = serde_json::from_value::<Message>(item.clone()).unwrap_err();
    assert!(err.to_string().contains("data"), "{err}");
    item["images"][0]["data"] = PNG_1X1.into();
    item["images"][0]["sha256"] = png().sha256().into();
    assert_eq!(serde_json::from_value::<Message>(item).unwrap().images(), [png()]);
}
