//! Model selection: `--model PROVIDER:NAME`.

use std::sync::Arc;

use reins::{Model, ScriptedModel};

use crate::exit::{CliError, usage};

/// Builds the model named by `spec`.
pub fn build_model(spec: &str) -> Result<Arc<dyn Model>, CliError> {
    let Some((provider, rest)) = spec.split_once(':') else {
        return Err(usage(format!("--model {spec:?}: expected PROVIDER:NAME, for example script:turns.json")));
    };
    match provider {
        "script" => {
            let text = crate::input::read_text(std::path::Path::new(rest), crate::input::MAX_SCRIPT_BYTES)
                .map_err(|e| usage(format!("cannot read script file {rest:?}: {e}")))?;
            let steps = reins::parse_script(&text).map_err(|e| usage(format!("script file {rest:?}: {e}")))?;
            Ok(Arc::new(ScriptedModel::new(steps)))
        }
        other => Err(usage(format!("--model {spec:?}: unknown provider {other:?} (known: script)"))),
    }
}
