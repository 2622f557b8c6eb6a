//! `events/sam-local-env.json` (the `--env-vars` file for `sam local invoke` /
//! `sam local start-api`) against `template.yaml`: every function, and for each
//! exactly the variables the template declares for it (globals and its own) —
//! `sam local` ignores a variable the template does not declare, and a declared
//! one left out would resolve the Secrets Manager reference, which fails locally.
use std::collections::{BTreeMap, BTreeSet};

/// Function logical id → the environment variable names the template gives it.
fn template_variables(template: &str) -> BTreeMap<String, BTreeSet<String>> {
    let mut globals = BTreeSet::new();
    let mut functions: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    let (mut section, mut resource, mut is_function, mut in_variables) = ("", String::new(), false, false);
    for line in template.lines() {
        let indent = line.len() - line.trim_start().len();
        let text = line.trim();
        if text.is_empty() || text.starts_with('#') {
            continue;
        }
        if indent == 0 {
            section = if text == "Globals:" {
                "globals"
            } else if text == "Resources:" {
                "resources"
            } else {
                ""
            };
            in_variables = false;
            continue;
        }
        if section == "resources" && indent == 2 {
            resource = text.trim_end_matches(':').to_owned();
            is_function = false;
            in_variables = false;
            continue;
        }
        if section == "resources" && indent == 4 && text == "Type: AWS::Serverless::Function" {
            is_function = true;
            functions.entry(resource.clone()).or_default();
        }
        // `Variables:` sits at 6 (Globals: Function: Environment:) or 8 (a resource's Properties: Environment:).
        let variables_indent = if section == "globals" { 6 } else { 8 };
        if text == "Variables:" && indent == variables_indent {
            in_variables = true;
            continue;
        }
        if in_variables && indent <= variables_indent {
            in_variables = false;
        }
        if in_variables && indent == variables_indent + 2 {
            let name = text.split(':').next().unwrap_or_default().to_owned();
            match section {
                "globals" => {
                    globals.insert(name);
                }
                "resources" if is_function => {
                    functions.entry(resource.clone()).or_default().insert(name);
                }
                _ => {}
            }
        }
    }
    functions.values_mut().for_each(|names| names.extend(globals.iter().cloned()));
    functions
}

#[test]
fn the_sam_local_env_file_covers_every_function_and_variable_of_the_template() {
    let root = concat!(env!("CARGO_MANIFEST_DIR"), "/..");
    let template = std::fs::read_to_string(format!("{root}/template.yaml")).expect("template.yaml");
    let env: BTreeMap<String, BTreeMap<String, String>> =
        serde_json::from_str(&std::fs::read_to_string(format!("{root}/events/sam-local-env.json")).expect("env file"))
            .expect("JSON: function -> variables");
    let declared = template_variables(&template);
    assert_eq!(declared.len(), 7, "seven functions in the template: {declared:?}");
    assert!(declared["IngestFunction"].contains("RELAYOPS_DATABASE_URL"), "globals are read: {declared:?}");
    assert!(declared["IngestFunction"].contains("RELAYOPS_WAKEUP_QUEUE_URL"), "own variables are read");
    let given: BTreeMap<String, BTreeSet<String>> =
        env.iter().map(|(function, variables)| (function.clone(), variables.keys().cloned().collect())).collect();
    assert_eq!(given, declared, "events/sam-local-env.json must match template.yaml");
    for variables in env.values() {
        for (name, value) in variables {
            assert!(!value.contains("resolve:"), "{name} must be a local value, not a Secrets Manager reference");
        }
    }
}
