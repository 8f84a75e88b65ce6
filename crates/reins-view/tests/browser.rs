//! The session page in a real headless browser (Debian's `chromium`, installed by `.ci/setup-chromium.sh`): it
//! loads from `file://` with no console message and no network request (all traffic goes through a recording
//! proxy), shows every step and tool call of a recorded session, its expanders open on a click, hostile text
//! stays text, and a 2000-step session renders to a screenshot.

mod common;

use common::{HOSTILE, Proxy, file_url, run_chromium, run_chromium_with};
use reins_store::Store;

/// The DOM chromium dumps after the page's scripts ran (`?expand=all` clicks every expander open).
fn dump(url: &str, proxy: &Proxy) -> common::Browser {
    run_chromium(url, &["--virtual-time-budget=5000", "--dump-dom"], Some(proxy))
}

/// Text as chromium serializes it in the DOM (`&`, `<`, `>` as entities; U+00A0 as `&nbsp;`).
fn as_dom_text(s: &str) -> String {
    s.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;").replace('\u{a0}', "&nbsp;")
}

#[test]
fn the_proxy_sees_what_a_page_requests() {
    // The control of the no-network check: a page that does make requests is caught.
    let dir = tempfile::tempdir().unwrap();
    let page = dir.path().join("probe.html");
    std::fs::write(
        &page,
        "<html><body><img src=\"http://reins-probe.test/a.png\"><script>fetch('http://reins-probe.test/f').catch(()=>{})</script></body></html>",
    )
    .unwrap();
    let proxy = Proxy::start();
    let b = dump(&file_url(&page), &proxy);
    let seen = proxy.page_requests();
    assert!(seen.iter().any(|r| r.contains("reins-probe.test")), "the proxy saw {seen:?}\n{}", b.stderr);
    assert!(seen.iter().any(|r| r.contains("reins-probe.test/f")), "a fetch too: {seen:?}");
}

#[test]
fn the_page_loads_from_file_with_no_console_message_and_no_request_and_shows_every_step_and_call() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path().join("s.db")).unwrap();
    let session = common::recorded_session(&store);
    let view = reins_view::build(&session);
    let html = reins_view::session_html(&view).unwrap();
    let page = dir.path().join("view.html");
    std::fs::write(&page, &html).unwrap();
    let proxy = Proxy::start();

    // As loaded: nothing clicked.
    let plain = dump(&file_url(&page), &proxy);
    assert!(plain.stdout.contains("data-ready=\"1\""), "the script ran to its end:\n{}", plain.stderr);
    assert!(plain.console().is_empty(), "console messages: {:?}", plain.console());

    // Every expander clicked.
    let b = dump(&format!("{}?expand=all", file_url(&page)), &proxy);
    assert!(b.console().is_empty(), "console messages: {:?}", b.console());
    assert_eq!(proxy.page_requests(), Vec::<String>::new(), "the page made requests");
    let dom = &b.stdout;
    assert!(dom.contains("data-ready=\"1\""), "the script ran to its end:\n{}", b.stderr);

    // Every step: a bar per model call in the timeline (its tooltip), each transcript item.
    let runs = &view.runs;
    for run in runs {
        for bar in &run.bars {
            let what = match bar.kind {
                "model" => format!("model call · step {}", bar.step),
                "tool" => format!("tool {} ({}) · step {}", bar.name, bar.call_id.as_deref().unwrap_or(""), bar.step),
                _ => format!("compaction after step {}", bar.step),
            };
            assert!(dom.contains(&as_dom_text(&what)), "bar {what:?} is missing");
        }
    }
    assert_eq!(dom.matches("class=\"bar model").count(), view.steps.len(), "a bar per model call");
    let tool_calls: usize = view.items.iter().map(|i| i.calls.len()).sum();
    assert_eq!(tool_calls, 5);
    assert_eq!(dom.matches("class=\"bar tool").count(), tool_calls, "a bar per tool call");
    assert_eq!(dom.matches("class=\"bar model error").count(), 1, "the failed model call in colour");
    assert_eq!(dom.matches("class=\"bar tool error").count(), 1, "the failed tool call in colour");
    assert!(dom.contains("class=\"mark compaction"), "the compaction is marked");
    assert!(dom.contains("class=\"mark approval"), "the approval is marked");
    assert!(dom.contains("1 reasoning item(s), sent back to anthropic only"), "the reasoning item is told");
    for it in &view.items {
        assert!(dom.contains(&format!("id=\"item-{}\"", it.i)), "item {} is missing", it.i);
    }
    // Every tool call and result has an expander, each was clicked and opened, and its body was built.
    let expanders = tool_calls * 2;
    assert!(dom.contains(&format!("data-clicked=\"{expanders}\"")), "every expander clicked");
    assert_eq!(dom.matches("<details").count(), expanders);
    assert_eq!(dom.matches("open=\"\"").count(), expanders, "every expander opened");
    for c in view.items.iter().flat_map(|i| &i.calls) {
        assert!(dom.contains(&format!("data-call=\"{}\"", c.id)));
    }
    // The opened bodies: the failing call's arguments, the slow call's result.
    assert!(dom.contains(&as_dom_text("\"why\": \"</script><script>alert(1)</script>")), "arguments shown");
    assert!(dom.contains("slow done</pre>"), "a result shown");
    // The long result: bounded, with the way to see all of it.
    assert!(dom.contains("Show all ("), "a long text is cut on the page");
    assert!(dom.contains("characters omitted"), "the page carries a bounded copy");

    // Hostile text is text: no script element but the page's two, the payload as escaped text.
    assert_eq!(dom.matches("<script").count(), 2, "no injected script element");
    assert!(!dom.contains("<img src=\"x\""), "no injected element");
    assert!(dom.contains(&as_dom_text("</script><script>alert(1)</script>")), "shown as text");
    assert!(dom.contains('\u{2028}') || dom.contains("line"), "U+2028 kept as text");
    assert!(!html.contains(HOSTILE), "the file carries the hostile text only escaped");
}

#[test]
fn a_2000_step_session_renders_to_a_screenshot() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path().join("s.db")).unwrap();
    let session = common::long_session(&store, 2000);
    let started = std::time::Instant::now();
    let view = reins_view::build(&session);
    let html = reins_view::session_html(&view).unwrap();
    let built = started.elapsed();
    assert_eq!(view.steps.len(), 2000);
    let page = dir.path().join("long.html");
    std::fs::write(&page, &html).unwrap();
    let shot = dir.path().join("long.png");
    let proxy = Proxy::start();
    let b = run_chromium(
        &file_url(&page),
        &["--window-size=1400,900", "--virtual-time-budget=5000", &format!("--screenshot={}", shot.display())],
        Some(&proxy),
    );
    let png = std::fs::read(&shot).unwrap_or_else(|e| panic!("no screenshot ({e}):\n{}", b.stderr));
    assert_eq!(&png[..8], b"\x89PNG\r\n\x1a\n");
    let (w, h) =
        (u32::from_be_bytes(png[16..20].try_into().unwrap()), u32::from_be_bytes(png[20..24].try_into().unwrap()));
    assert_eq!((w, h), (1400, 900));
    assert!(png.len() > 20_000, "the screenshot shows something ({} bytes)", png.len());
    assert!(b.console().is_empty(), "console messages: {:?}", b.console());
    assert_eq!(proxy.page_requests(), Vec::<String>::new());
    // Figures for the note (no assertion on time): the page's size, the time to build it, chromium's run.
    eprintln!(
        "2000-step session: page {} KiB, built in {:?}, chromium start + render + screenshot {:?}",
        html.len() / 1024,
        built,
        b.elapsed
    );
    if let Some(out) = std::env::var_os("REINS_VIEW_SCREENSHOT") {
        std::fs::copy(&shot, out).unwrap();
    }
    // The DOM of the same page: the first chunk of the transcript is drawn, the rest waits for scrolling.
    let dom = run_chromium(&file_url(&page), &["--virtual-time-budget=5000", "--dump-dom"], Some(&proxy)).stdout;
    assert!(dom.contains("data-ready=\"1\""));
    let render_ms = dom.split("data-render-ms=\"").nth(1).and_then(|r| r.split('"').next()).unwrap_or("?");
    eprintln!("2000-step session: first view drawn {render_ms} ms after navigation began (chromium's own clock)");
    assert_eq!(dom.matches("class=\"bar model").count(), 2000);
    assert!(dom.contains("id=\"item-199\"") && !dom.contains("id=\"item-1000\""), "the transcript is drawn lazily");
}

/// The page's own check of its layout (`?check=layout`): `ok`, or what sticks out where.
fn layout_of(dom: &str) -> &str {
    dom.split("data-layout=\"").nth(1).and_then(|r| r.split('"').next()).unwrap_or("(not checked)")
}

#[test]
fn the_page_fits_1000_and_1400_px_wide_with_scrollbars_and_a_single_step_is_drawn() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path().join("s.db")).unwrap();
    let shots = std::env::var_os("REINS_VIEW_SCREENSHOTS").map(std::path::PathBuf::from);
    let sessions = [("recorded", common::recorded_session(&store)), ("one-step", common::one_step_session(&store))];
    for (name, session) in &sessions {
        let view = reins_view::build(session);
        let page = dir.path().join(format!("{name}.html"));
        std::fs::write(&page, reins_view::session_html(&view).unwrap()).unwrap();
        for width in [1000, 1400] {
            let size = format!("--window-size={width},900");
            // Scrollbars shown, as in a person's browser: the transcript makes the page taller than the window.
            let b = run_chromium_with(
                &format!("{}?check=layout", file_url(&page)),
                &[&size, "--virtual-time-budget=5000", "--dump-dom"],
                None,
                false,
            );
            assert!(b.stdout.contains("data-ready=\"1\""), "{name} at {width}: {}", b.stderr);
            // Nothing wider than the window (no horizontal scrollbar), every bar, label and mark inside its box.
            assert_eq!(layout_of(&b.stdout), "ok", "{name} at {width} px");
            if *name == "one-step" {
                // One step is a point of each series: drawn as a marker, not an invisible line.
                for series in ["s-input", "s-output", "s-cost"] {
                    assert!(b.stdout.contains(&format!("class=\"pt {series}\"")), "{name}: no marker of {series}");
                }
            }
            if let Some(out) = &shots {
                let shot = out.join(format!("{name}-{width}.png"));
                run_chromium_with(
                    &file_url(&page),
                    &[&size, "--virtual-time-budget=5000", &format!("--screenshot={}", shot.display())],
                    None,
                    false,
                );
            }
        }
    }
}

#[test]
fn the_served_page_of_a_running_session_redraws_as_the_run_goes_on() {
    use std::time::Duration;
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path().join("s.db")).unwrap();
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    let token = reins_view::server::new_token().unwrap();
    let cancel = tokio_util::sync::CancellationToken::new();
    let listener = rt.block_on(tokio::net::TcpListener::bind("127.0.0.1:0")).unwrap();
    let addr = listener.local_addr().unwrap();
    let server = rt.spawn(reins_view::server::serve(listener, store.clone(), token.clone(), cancel.clone()));
    // A run that goes on for a while: 300 steps of 20 ms, each with a call.
    let steps: Vec<reins::ScriptStep> = (0..300)
        .map(|i| {
            let r = reins::ModelResponse::tool_calls(
                format!("turn {i}"),
                vec![reins::ToolCall::new(format!("c{i}"), "echo", serde_json::json!({"text": "x"}))],
            );
            reins::ScriptStep::Delay(Duration::from_millis(20), Box::new(r.into()))
        })
        .chain(std::iter::once(reins::ModelResponse::text("done").into()))
        .collect();
    let agent = reins::Agent::builder(reins::ScriptedModel::new(steps))
        .registry(common::registry())
        .limits(reins::Limits { max_steps: Some(400), max_tool_calls: Some(400), ..reins::Limits::default() })
        .journal(store.journal(Default::default()))
        .build()
        .unwrap();
    let run_cancel = tokio_util::sync::CancellationToken::new();
    let run = rt.spawn({
        let c = run_cancel.clone();
        async move { agent.run("slowly", c).await }
    });
    let t0 = std::time::Instant::now();
    let id = loop {
        if let Some(s) = store.list().unwrap().into_iter().find(|s| s.steps >= 1) {
            break s.id;
        }
        assert!(t0.elapsed() < Duration::from_secs(20), "the run never recorded a step");
        std::thread::sleep(Duration::from_millis(50));
    };
    // A minute of the page's virtual time: 40 polls, each a real request (virtual time waits for it) while the
    // run records more steps.
    let url = format!("http://{addr}/s/{id}?token={token}");
    let b = run_chromium(&url, &["--virtual-time-budget=60000", "--dump-dom"], None);
    // The list page: the session, linked with the token.
    let list =
        run_chromium(&format!("http://{addr}/?token={token}"), &["--virtual-time-budget=3000", "--dump-dom"], None);
    run_cancel.cancel();
    let _ = rt.block_on(run);
    cancel.cancel();
    rt.block_on(server).unwrap().unwrap();
    let dom = &b.stdout;
    assert!(dom.contains("data-ready=\"1\""), "{}", b.stderr);
    assert!(b.console().is_empty(), "console messages (a CSP refusal of the polls would show here): {:?}", b.console());
    let start = dom.find("data-page=\"session\">").unwrap() + "data-page=\"session\">".len();
    let end = start + dom[start..].find("</script>").unwrap();
    let served: serde_json::Value = serde_json::from_str(&dom[start..end]).unwrap();
    let served_steps = served["steps"].as_array().unwrap().len();
    let drawn = dom.matches("class=\"bar model").count();
    eprintln!("served with {served_steps} steps, redrawn with {drawn}");
    assert!(drawn > served_steps, "the page redrew with the new steps: {drawn} bars, {served_steps} when served");
    assert!(dom.contains("● live"));
    assert!(list.stdout.contains("data-ready=\"1\""), "{}", list.stderr);
    assert!(list.console().is_empty(), "console messages: {:?}", list.console());
    assert!(list.stdout.contains(&format!("href=\"/s/{id}?token={token}\"")), "the session is linked");
}
