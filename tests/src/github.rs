//! The fake GitHub REST server: an axum server on 127.0.0.1 that answers the endpoints
//! orch's publishing uses (pull requests and their files, reviews, issue comments,
//! issues, labels, check runs, code-scanning SARIF uploads) the way GitHub does:
//! 401 without a token, 403 for a read-only token on a write, 404 for an unknown pull
//! request or issue, 422 for a review comment outside the diff or a check run with more
//! than 50 annotations, `Link` pagination with `per_page`. It records every request, and
//! its state lives as long as the server, so a second run finds what the first posted.
//!
//! ```no_run
//! # async fn demo() {
//! use orch_testkit::github::{Access, FakeGitHub, PullSpec};
//! let gh = FakeGitHub::start().await;
//! gh.add_token("ghs_write", Access::Write);
//! gh.add_pull("acme/app", PullSpec::new(7, "abc123").file("src/lib.rs", "@@ -1,2 +1,3 @@\n a\n+b\n c"));
//! // point orch at gh.url() with GITHUB_API_URL, run it, then:
//! let reviews = gh.reviews("acme/app", 7);
//! # }
//! ```

mod diff;
mod page;
mod routes;
mod state;

#[cfg(test)]
mod tests;

use std::net::SocketAddr;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use axum::Router;
use axum::extract::DefaultBodyLimit;
use tokio_util::sync::CancellationToken;

pub use diff::right_lines;
pub use state::{Access, CheckRun, Comment, Fault, GhRequest, Issue, Pull, PullFile, PullSpec, Review, SarifUpload};

use state::Data;

/// GitHub's limit on the body of a comment, a review, an issue or a pull request.
pub const MAX_BODY_CHARS: usize = 65_536;

/// GitHub's limit on annotations per check-run request.
pub const MAX_ANNOTATIONS_PER_REQUEST: usize = 50;

/// A running fake GitHub server. It stops when dropped.
pub struct FakeGitHub {
    addr: SocketAddr,
    shared: Arc<Shared>,
}

pub(crate) struct Shared {
    data: Mutex<Data>,
    log: Mutex<Vec<GhRequest>>,
    faults: Mutex<Vec<Fault>>,
    shutdown: CancellationToken,
    addr: SocketAddr,
}

impl Shared {
    pub(crate) fn data(&self) -> MutexGuard<'_, Data> {
        self.data.lock().unwrap_or_else(PoisonError::into_inner)
    }

    pub(crate) fn log(&self) -> MutexGuard<'_, Vec<GhRequest>> {
        self.log.lock().unwrap_or_else(PoisonError::into_inner)
    }

    pub(crate) fn faults(&self) -> MutexGuard<'_, Vec<Fault>> {
        self.faults.lock().unwrap_or_else(PoisonError::into_inner)
    }

    pub(crate) fn base_url(&self) -> String {
        format!("http://{}", self.addr)
    }
}

impl FakeGitHub {
    /// Binds 127.0.0.1 on a free port and serves in a tokio task.
    ///
    /// # Panics
    /// When the port cannot be bound (test-only code).
    pub async fn start() -> FakeGitHub {
        let listener = match tokio::net::TcpListener::bind(("127.0.0.1", 0)).await {
            Ok(listener) => listener,
            Err(err) => panic!("fake github: cannot bind 127.0.0.1: {err}"),
        };
        let addr = listener.local_addr().expect("local address of a bound listener");
        let shared = Arc::new(Shared {
            data: Mutex::new(Data::default()),
            log: Mutex::new(Vec::new()),
            faults: Mutex::new(Vec::new()),
            shutdown: CancellationToken::new(),
            addr,
        });
        let app = Router::new()
            .fallback(routes::handle)
            .layer(DefaultBodyLimit::max(64 << 20))
            .with_state(Arc::clone(&shared));
        let stop = shared.shutdown.clone().cancelled_owned();
        tokio::spawn(async move {
            let _ = axum::serve(listener, app).with_graceful_shutdown(stop).await;
        });
        FakeGitHub { addr, shared }
    }

    /// `http://127.0.0.1:PORT`, without a trailing slash (what `GITHUB_API_URL` holds).
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Accepts `token` (as `Authorization: Bearer <token>` or `token <token>`).
    pub fn add_token(&self, token: &str, access: Access) {
        self.shared.data().tokens.insert(token.to_owned(), access);
    }

    /// Opens a pull request in `repo` (`owner/name`) with the given files and patches.
    pub fn add_pull(&self, repo: &str, spec: PullSpec) {
        self.shared.data().add_pull(repo, spec);
    }

    /// Answers the next request whose method and path match `fault` with its status.
    pub fn inject(&self, fault: Fault) {
        self.shared.faults().push(fault);
    }

    /// Every request received so far, in arrival order.
    pub fn requests(&self) -> Vec<GhRequest> {
        self.shared.log().clone()
    }

    /// The requests that changed something (every method but GET).
    pub fn writes(&self) -> Vec<GhRequest> {
        self.requests().into_iter().filter(|r| r.method != "GET").collect()
    }

    /// The reviews posted on a pull request, oldest first.
    pub fn reviews(&self, repo: &str, number: u64) -> Vec<Review> {
        let data = self.shared.data();
        data.reviews.iter().filter(|r| r.repo == repo && r.pull == number).cloned().collect()
    }

    /// The comments on an issue or pull request, oldest first.
    pub fn comments(&self, repo: &str, number: u64) -> Vec<Comment> {
        let data = self.shared.data();
        data.comments.iter().filter(|c| c.repo == repo && c.issue == number).cloned().collect()
    }

    /// Every pull request of `repo`, by number.
    pub fn pulls(&self, repo: &str) -> Vec<Pull> {
        self.shared.data().pulls.iter().filter(|p| p.repo == repo).cloned().collect()
    }

    /// Every issue of `repo` that is not a pull request, by number.
    pub fn issues(&self, repo: &str) -> Vec<Issue> {
        self.shared.data().issues.iter().filter(|i| i.repo == repo).cloned().collect()
    }

    /// The check runs of `repo`, oldest first.
    pub fn check_runs(&self, repo: &str) -> Vec<CheckRun> {
        self.shared.data().check_runs.iter().filter(|c| c.repo == repo).cloned().collect()
    }

    /// The SARIF uploads of `repo`, decoded, oldest first.
    pub fn sarif_uploads(&self, repo: &str) -> Vec<SarifUpload> {
        self.shared.data().sarifs.iter().filter(|s| s.repo == repo).cloned().collect()
    }

    /// The code-scanning analyses `repo` shows: as on GitHub, an upload replaces the
    /// earlier one of the same ref, tool and category, so this is the latest upload of
    /// each, oldest first.
    pub fn sarif_analyses(&self, repo: &str) -> Vec<SarifUpload> {
        let uploads = self.sarif_uploads(repo);
        let mut latest: Vec<SarifUpload> = Vec::new();
        for upload in uploads {
            latest.retain(|u| (&u.git_ref, &u.tool, &u.category) != (&upload.git_ref, &upload.tool, &upload.category));
            latest.push(upload);
        }
        latest
    }
}

impl Drop for FakeGitHub {
    fn drop(&mut self) {
        self.shared.shutdown.cancel();
    }
}
