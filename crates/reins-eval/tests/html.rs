//! The HTML report of a 2,000-case eval: self-contained, inert data, and rendered page by page in headless
//! Chromium (skipped where there is no Chromium).

use std::process::{Command, Stdio};

use reins_eval::{AgentRecord, Attempt, CheckResult, EvalMeta, Observed, Options, Summary};

fn summary(cases: usize) -> Summary {
    let meta = EvalMeta {
        id: "ev-000000000001".into(),
        created_at: "2026-01-01T00:00:00Z".into(),
        suite: "/suite.toml".into(),
        suite_name: "big".into(),
        suite_text: String::new(),
        cases: (0..cases).map(|i| format!("case-{i}")).collect(),
        agents: vec![AgentRecord { label: "a".into(), path: None, text: None }],
        options: Options::default(),
        reins_version: "0".into(),
        rescored_from: None,
    };
    let attempts: Vec<Attempt> = (0..cases)
        .map(|i| Attempt {
            agent: 0,
            case: format!("case-{i}"),
            epoch: 1,
            try_number: 1,
            session_id: Some(format!("session-{i}")),
            observed: Some(Observed { status: "completed".into(), steps: 1, ..Observed::default() }),
            checks: vec![CheckResult {
                kind: "contains".into(),
                score: (i % 2) as f64,
                passed: i % 2 == 1,
                // Data that would be markup if it were not kept inert.
                reason: "the answer </script><img src=x onerror=alert(1)> is wrong".into(),
                weight: 1.0,
            }],
            score: (i % 2) as f64,
            passed: i % 2 == 1,
            infra: None,
            workspace: None,
            started_at: String::new(),
            duration_ms: 1,
        })
        .collect();
    Summary::new(&meta, &attempts)
}

#[test]
fn the_report_is_self_contained_and_its_data_inert() {
    let page = reins_eval::html(&summary(2000)).unwrap();
    assert!(page.contains("default-src 'none'"), "a CSP without network access");
    assert!(!page.contains("http://") && !page.contains("https://"), "no external resource");
    assert_eq!(page.matches("</script>").count(), 2, "the data cannot close its block");
    assert!(!page.contains("<img"), "no markup from the data");
    let start = page.find("id=\"eval-data\">").unwrap() + "id=\"eval-data\">".len();
    let end = start + page[start..].find("</script>").unwrap();
    let data: serde_json::Value = serde_json::from_str(&page[start..end]).unwrap();
    assert_eq!(data["agents"][0]["cases"].as_array().unwrap().len(), 2000);
}

#[test]
fn the_report_renders_in_headless_chromium_one_page_at_a_time() {
    let Some(chromium) = ["chromium", "chromium-browser", "google-chrome"]
        .into_iter()
        .find(|c| Command::new(c).arg("--version").stdout(Stdio::null()).stderr(Stdio::null()).status().is_ok())
    else {
        eprintln!("no Chromium: skipped");
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("report.html");
    std::fs::write(&file, reins_eval::html(&summary(2000)).unwrap()).unwrap();
    let profile = tempfile::tempdir().unwrap();
    let out = Command::new(chromium)
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--no-first-run",
            "--virtual-time-budget=10000",
            "--dump-dom",
        ])
        .arg(format!("--user-data-dir={}", profile.path().display()))
        .arg(format!("file://{}", file.display()))
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let dom = String::from_utf8_lossy(&out.stdout);
    assert!(dom.contains("Eval ev-000000000001 of big"), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(dom.contains("page 1 of 20"), "paged by 100");
    assert_eq!(dom.matches("<tr>").count(), 101, "one page of rows and the header");
    assert!(dom.contains(">case-99<") && !dom.contains(">case-100<"));
    assert!(dom.contains("reins sessions view session-1"));
    assert!(dom.contains("1000 passed, 1000 failed"));
    assert!(!dom.contains("<img"), "the data stayed text");
}

#[test]
fn the_linked_report_links_each_attempt_to_its_session_page_and_names_the_missing() {
    let summary = summary(2000);
    let pages =
        reins_eval::SessionPages { written: 1999, kept: 0, missing: ["session-0".to_owned()].into_iter().collect() };
    let page = reins_eval::html_linked(&summary, &pages).unwrap();
    assert!(page.contains("default-src 'none'"));
    assert_eq!(page.matches("</script>").count(), 2, "the links' data is in the inert block");
    let Some(chromium) = ["chromium", "chromium-browser", "google-chrome"]
        .into_iter()
        .find(|c| Command::new(c).arg("--version").stdout(Stdio::null()).stderr(Stdio::null()).status().is_ok())
    else {
        eprintln!("no Chromium: skipped");
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("report.html");
    std::fs::write(&file, page).unwrap();
    let profile = tempfile::tempdir().unwrap();
    let out = Command::new(chromium)
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--no-first-run",
            "--virtual-time-budget=10000",
            "--dump-dom",
        ])
        .arg(format!("--user-data-dir={}", profile.path().display()))
        .arg(format!("file://{}", file.display()))
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let dom = String::from_utf8_lossy(&out.stdout);
    assert!(dom.contains("page 1 of 20"), "{}", String::from_utf8_lossy(&out.stderr));
    // The first page's 100 attempts: 99 links, relative to the report; the session with no page named instead.
    assert_eq!(dom.matches("<a href=\"sessions/").count(), 99, "{dom}");
    assert!(dom.contains("<a href=\"sessions/session-1.html\" title=\"session-1\">session session-</a>"), "{dom}");
    assert!(dom.contains("reins sessions view session-0") && !dom.contains("sessions/session-0.html"));
}
