//! `learner`, `token` and `oauth clients`: create, list (JSON lines, never a secret) and revoke.
//! Every revocation is recorded in the operator audit with the actor `cli`.

use std::sync::Arc;

use super::{ClientsCommand, LearnerCommand, StaffRole, TokenCommand};
use crate::app::identity::Role;
use crate::app::App;
use crate::error::AppError;

const ACTOR: &str = "cli";

fn failed(what: &str, e: &AppError) -> anyhow::Error {
    anyhow::anyhow!("cannot {what}: {}", e.code())
}

fn print_lines<T: serde::Serialize>(rows: &[T]) -> anyhow::Result<i32> {
    for row in rows {
        println!("{}", serde_json::to_string(row)?);
    }
    Ok(0)
}

/// A revocation's exit: 0 when done, 2 with a message when there was nothing to revoke.
fn revoked(result: Result<(), AppError>, what: &str, id: &str) -> anyhow::Result<i32> {
    match result {
        Ok(()) => {
            println!("{what} {id} revoked");
            Ok(0)
        }
        Err(AppError::NotFound { .. }) => {
            eprintln!("no active {what} `{id}` (see the list command)");
            Ok(2)
        }
        Err(AppError::ValidationFailed { field }) => {
            eprintln!("`{id}` is not a valid {field}");
            Ok(2)
        }
        Err(e) => Err(failed(&format!("revoke the {what}"), &e)),
    }
}

pub(super) async fn learner(app: &Arc<App>, command: LearnerCommand) -> anyhow::Result<i32> {
    match command {
        LearnerCommand::Create { name } => {
            let token = app.create_learner(&name).await.map_err(|e| failed("create the learner", &e))?;
            println!("learner created; bearer token (shown once):");
            println!("{token}");
            Ok(0)
        }
        LearnerCommand::List => print_lines(&app.list_learners().await.map_err(|e| failed("list learners", &e))?),
        LearnerCommand::Revoke { learner_id } => revoked(app.revoke_learner(ACTOR, &learner_id).await, "learner", &learner_id),
    }
}

pub(super) async fn token(app: &Arc<App>, command: TokenCommand) -> anyhow::Result<i32> {
    match command {
        TokenCommand::Create { role } => {
            let role = match role {
                StaffRole::Operator => Role::Operator,
                StaffRole::Analyst => Role::Analyst,
            };
            let token = app.create_staff_token(role).await.map_err(|e| failed("create the token", &e))?;
            println!("{} token (shown once):", role.as_str());
            println!("{token}");
            Ok(0)
        }
        TokenCommand::List => print_lines(&app.list_tokens().await.map_err(|e| failed("list tokens", &e))?),
        TokenCommand::Revoke { token_id } => revoked(app.revoke_token(ACTOR, &token_id).await, "token", &token_id),
    }
}

pub(super) async fn clients(app: &Arc<App>, command: ClientsCommand) -> anyhow::Result<i32> {
    match command {
        ClientsCommand::List => print_lines(&app.list_oauth_clients().await.map_err(|e| failed("list OAuth clients", &e))?),
        ClientsCommand::Revoke { client_id } => revoked(app.revoke_oauth_client(ACTOR, &client_id).await, "OAuth client", &client_id),
    }
}
