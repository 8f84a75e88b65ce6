//! The decisions `reins approve` is given on its command line (`--call`, `--all`, `--deny`, `--edit`), bound to the
//! calls a session (or a durable run) waits on.

use std::collections::HashSet;

use reins::{ApprovalDecision, PendingCall};

use crate::exit::{CliError, usage};

/// Parses `--edit CALL_ID=JSON`: the id is what comes before the first `=`, the rest is JSON.
pub fn parse_edit(spec: &str) -> Result<(String, serde_json::Value), String> {
    let (id, json) =
        spec.split_once('=').ok_or_else(|| format!("--edit {spec:?}: expected CALL_ID=JSON (the new arguments)"))?;
    if id.is_empty() {
        return Err(format!("--edit {spec:?}: the call id before `=` is empty"));
    }
    let value: serde_json::Value =
        serde_json::from_str(json).map_err(|e| format!("--edit {id}: the arguments are not JSON: {e}"))?;
    if !value.is_object() {
        return Err(format!("--edit {id}: the arguments must be a JSON object"));
    }
    Ok((id.to_owned(), value))
}

/// The decisions the flags of `reins approve` make about the `waiting` calls (those that need one), each
/// bound to the call's id and the hash of the arguments it waits with.
pub fn decisions(
    waiting: &[PendingCall],
    calls: &[String],
    all: bool,
    deny: Option<&str>,
    edits: &[String],
) -> Result<Vec<ApprovalDecision>, String> {
    let list = || waiting.iter().map(|p| format!("{} {}", p.call_id, p.name)).collect::<Vec<_>>().join(", ");
    let find = |id: &str| {
        waiting
            .iter()
            .find(|p| p.call_id == id)
            .ok_or_else(|| format!("no call {id:?} waits for a decision (waiting: {})", list()))
    };
    if calls.is_empty() && !all && edits.is_empty() {
        return Err(format!("say which calls: --call CALL_ID, --all or --edit CALL_ID=JSON (waiting: {})", list()));
    }
    if deny.is_some() && calls.is_empty() && !all {
        return Err("--deny needs the calls it denies: --call CALL_ID or --all".into());
    }
    if let Some(r) = deny {
        if r.trim().is_empty() {
            return Err("--deny needs a reason (the model gets it)".into());
        }
    }
    let mut out = Vec::new();
    let mut decided = HashSet::new();
    for spec in edits {
        let (id, arguments) = parse_edit(spec)?;
        let p = find(&id)?;
        if !decided.insert(p.call_id.clone()) {
            return Err(format!("call {id:?} is decided twice"));
        }
        out.push(ApprovalDecision::edit(p, arguments));
    }
    let chosen: Vec<&PendingCall> = if all {
        waiting.iter().filter(|p| !decided.contains(&p.call_id)).collect()
    } else {
        calls.iter().map(|id| find(id)).collect::<Result<_, _>>()?
    };
    for p in chosen {
        if !decided.insert(p.call_id.clone()) {
            return Err(format!("call {:?} is decided twice", p.call_id));
        }
        out.push(match deny {
            Some(reason) => ApprovalDecision::deny(p, reason),
            None => ApprovalDecision::approve(p),
        });
    }
    Ok(out)
}

/// The decisions given on the command line, applied to the batch the session waits on.
pub struct Given {
    /// `--call CALL_ID`, each.
    pub calls: Vec<String>,
    /// `--all`.
    pub all: bool,
    /// `--deny REASON`.
    pub deny: Option<String>,
    /// `--edit CALL_ID=JSON`, each.
    pub edit: Vec<String>,
}

impl Given {
    /// The decisions about the `waiting` calls (those that need one), bound to their ids and hashes.
    pub fn decisions_for(&self, waiting: &[PendingCall]) -> Result<Vec<ApprovalDecision>, String> {
        decisions(waiting, &self.calls, self.all, self.deny.as_deref(), &self.edit)
    }

    /// The decisions about `state`'s waiting batch, each checked on a copy of the state first: an edit the
    /// tool's schema refuses, or a call that does not wait, is a usage error and nothing is recorded.
    pub fn decide(
        &self,
        session: &str,
        state: &reins::RunState,
        registry: &reins::Registry,
    ) -> Result<Vec<ApprovalDecision>, CliError> {
        if !state.awaits_decision() {
            return Err(usage(format!("session {session} does not wait for an approval")));
        }
        let waiting: Vec<PendingCall> = state.pending_batch().into_iter().filter(PendingCall::needs_decision).collect();
        let list = decisions(&waiting, &self.calls, self.all, self.deny.as_deref(), &self.edit).map_err(usage)?;
        let mut check = state.clone();
        for d in &list {
            check.decide(d, registry).map_err(|e| usage(e.to_string()))?;
        }
        Ok(list)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use serde_json::json;

    fn waiting(ids: &[&str]) -> Vec<PendingCall> {
        ids.iter()
            .map(|id| PendingCall {
                call_id: (*id).into(),
                name: "write_file".into(),
                arguments: json!({"path": id}),
                arguments_hash: reins::arguments_hash(&json!({"path": id})),
                plan: reins::Plan::Ask { reason: "r".into() },
                edited_by: None,
                sub_agent: None,
                result: None,
            })
            .collect()
    }

    #[test]
    fn flags_make_bound_decisions_or_clear_errors() {
        let w = waiting(&["c1", "c2"]);
        let s = |v: &[&str]| v.iter().map(|x| (*x).to_owned()).collect::<Vec<_>>();
        let d = decisions(&w, &[], true, None, &s(&["c2={\"path\":\"b\"}"])).unwrap();
        assert_eq!(d.len(), 2);
        assert_eq!(d[0].verdict, reins::Verdict::Edit { arguments: json!({"path": "b"}) });
        assert_eq!(d[1].call_id, "c1");
        assert_eq!(d[1].arguments_hash, w[0].arguments_hash);
        let d = decisions(&w, &s(&["c1"]), false, Some("no"), &[]).unwrap();
        assert_eq!(d, vec![ApprovalDecision::deny(&w[0], "no")]);
        for (calls, all, deny, edits, needle) in [
            (s(&[]), false, None, s(&[]), "say which calls"),
            (s(&["zz"]), false, None, s(&[]), "no call \"zz\""),
            (s(&[]), false, Some("x"), s(&["c1={}"]), "--deny needs"),
            (s(&["c1"]), false, Some(" "), s(&[]), "needs a reason"),
            (s(&["c1"]), false, None, s(&["c1={}"]), "decided twice"),
            (s(&[]), false, None, s(&["c1"]), "expected CALL_ID=JSON"),
            (s(&[]), false, None, s(&["c1=[1]"]), "a JSON object"),
            (s(&[]), false, None, s(&["c1={"]), "not JSON"),
            (s(&[]), false, None, s(&["=1"]), "empty"),
        ] {
            let e = decisions(&w, &calls, all, deny, &edits).unwrap_err();
            assert!(e.contains(needle), "{e}");
        }
    }

    proptest! {
        #[test]
        fn edit_specs_round_trip(id in "[A-Za-z0-9_:.-]{1,20}", key in "[a-z]{1,6}", n in any::<i64>(), s in "\\PC{0,20}") {
            let args = json!({ key: n, "s": s });
            let (got_id, got) = parse_edit(&format!("{id}={args}")).unwrap();
            prop_assert_eq!(got_id, id);
            prop_assert_eq!(got, args);
        }

        #[test]
        fn edit_parsing_never_panics(spec in "\\PC{0,40}") {
            let _ = parse_edit(&spec);
        }

        #[test]
        fn every_decision_names_a_waiting_call_once_with_its_hash(
            n in 1usize..5, pick in proptest::collection::vec(0usize..5, 0..5), all in any::<bool>(), deny in any::<bool>()
        ) {
            let ids: Vec<String> = (0..n).map(|i| format!("c{i}")).collect();
            let refs: Vec<&str> = ids.iter().map(String::as_str).collect();
            let w = waiting(&refs);
            let calls: Vec<String> = if all { Vec::new() } else { pick.iter().map(|i| format!("c{i}")).collect() };
            match decisions(&w, &calls, all, deny.then_some("no"), &[]) {
                Ok(d) => {
                    let mut seen = HashSet::new();
                    for x in &d {
                        let p = w.iter().find(|p| p.call_id == x.call_id).unwrap();
                        prop_assert_eq!(&x.arguments_hash, &p.arguments_hash);
                        prop_assert!(seen.insert(x.call_id.clone()));
                    }
                    if all { prop_assert_eq!(d.len(), n); }
                }
                Err(e) => prop_assert!(!e.is_empty()),
            }
        }
    }
}
