//! Images and PDFs for `Read`: recognised by their first bytes, checked against the
//! provider's size limits, and returned as base64 image or document blocks that travel
//! with the tool result to the model. A PDF is sent whole only when it is small (at most
//! [`pdf::MAX_PAGES_WITHOUT_RANGE`] pages); otherwise the model asks for a page range
//! (`pages`), and only those pages are sent (see [`super::pdf`]).

use std::path::Path;

use base64::Engine;

use super::pdf::{self, PageRange};
use super::{FileStamp, Rich, ToolContext, ToolError};
use crate::message::{ContentBlock, MediaSource};

/// The largest image file sent: its base64 form stays within the Anthropic API's 5 MB
/// per image.
pub const MAX_IMAGE_BYTES: u64 = 5 * 1024 * 1024 / 4 * 3;
/// The largest PDF sent: its base64 form stays well within the API's 32 MB request.
pub const MAX_PDF_BYTES: u64 = 20 * 1024 * 1024;
/// The largest PDF file read to take a page range from.
pub const MAX_PDF_SOURCE_BYTES: u64 = 100 * 1024 * 1024;

/// The media type announced by a file's first bytes, for the kinds `Read` sends as
/// blocks: PNG, JPEG, GIF, WebP and PDF.
pub fn sniff(head: &[u8]) -> Option<&'static str> {
    if head.starts_with(b"\x89PNG\r\n\x1a\n") {
        Some("image/png")
    } else if head.starts_with(&[0xFF, 0xD8, 0xFF]) {
        Some("image/jpeg")
    } else if head.starts_with(b"GIF87a") || head.starts_with(b"GIF89a") {
        Some("image/gif")
    } else if head.len() >= 12 && head.starts_with(b"RIFF") && &head[8..12] == b"WEBP" {
        Some("image/webp")
    } else if head.starts_with(b"%PDF-") {
        Some("application/pdf")
    } else {
        None
    }
}

/// The most `Read` takes of a file of `media_type` sent as a block: an image, a whole
/// PDF, or a PDF of which only some `pages` are sent.
pub fn limit(media_type: &str, pages: bool) -> u64 {
    match (media_type == "application/pdf", pages) {
        (false, _) => MAX_IMAGE_BYTES,
        (true, false) => MAX_PDF_BYTES,
        (true, true) => MAX_PDF_SOURCE_BYTES,
    }
}

/// Sends the file at `path`, already found to be of `media_type` (by [`sniff`]) and
/// read whole into `bytes` (`None`: it was larger than its kind's limit and not read),
/// as an image or document block. `pages` (already checked by [`PageRange::parse`])
/// applies to PDFs only.
pub async fn attach(
    path: &Path,
    media_type: &'static str,
    metadata: &std::fs::Metadata,
    bytes: Option<Vec<u8>>,
    pages: Option<PageRange>,
    ctx: &ToolContext,
) -> Result<Rich, ToolError> {
    let pdf = media_type == "application/pdf";
    if pages.is_some() && !pdf {
        return Err(ToolError(format!(
            "{} is an image; `pages` applies to PDF files only. Read it without `pages`.",
            path.display()
        )));
    }
    let limit = limit(media_type, pages.is_some());
    let size = metadata.len();
    let bytes = match bytes {
        Some(bytes) if size <= limit => bytes,
        _ => {
            let what = if pdf { "PDF" } else { "image" };
            let hint = if pdf && pages.is_none() {
                "Read it a few pages at a time with `pages` (for example \"1-5\")."
            } else {
                "Make a smaller copy with Bash (for example with ImageMagick or pdftk, if installed) and Read that."
            };
            return Err(ToolError(format!(
                "{} is a {what} of {size} bytes, more than the {limit} bytes Read takes for one {what}. {hint}",
                path.display()
            )));
        }
    };
    let stamp = FileStamp::of(&bytes, metadata);
    if !pdf {
        ctx.session.record_read(path, stamp);
        let data = base64::engine::general_purpose::STANDARD.encode(&bytes);
        return Ok(Rich {
            text: format!("{} is an image ({media_type}, {size} bytes); it is attached below.", path.display()),
            attachments: vec![ContentBlock::Image { source: MediaSource::base64(media_type, data) }],
        });
    }
    let (bytes, text) = match pages {
        Some(range) => {
            let cut = blocking(bytes, move |b| pdf::cut(b, range)).await.map_err(|e| {
                ToolError(format!("cannot take pages {}-{} of {}: {e}", range.first, range.last, path.display()))
            })?;
            if cut.bytes.len() as u64 > MAX_PDF_BYTES {
                return Err(ToolError(format!(
                    "pages {}-{} of {} make {} bytes, more than the {MAX_PDF_BYTES} bytes Read sends at once; ask \
                     for fewer pages",
                    cut.sent.first,
                    cut.sent.last,
                    path.display(),
                    cut.bytes.len()
                )));
            }
            let shown = if cut.sent.first == cut.sent.last {
                format!("page {}", cut.sent.first)
            } else {
                format!("pages {}-{}", cut.sent.first, cut.sent.last)
            };
            let text = format!(
                "{} is a PDF document of {} pages; {shown} ({} bytes) are attached below.",
                path.display(),
                cut.total,
                cut.bytes.len()
            );
            (cut.bytes, text)
        }
        None => {
            // A file lopdf cannot parse is sent as it is (the model's API judges it).
            let counted = blocking(bytes.clone(), pdf::page_count).await.ok();
            if let Some(total) = counted.filter(|n| *n > pdf::MAX_PAGES_WITHOUT_RANGE) {
                return Err(ToolError(format!(
                    "{} is a PDF of {total} pages, too many to read at once. Read it with `pages` (for example \
                     \"1-5\"), at most {} pages per call.",
                    path.display(),
                    pdf::MAX_PAGES_PER_READ
                )));
            }
            let text =
                format!("{} is a PDF document ({media_type}, {size} bytes); it is attached below.", path.display());
            (bytes, text)
        }
    };
    ctx.session.record_read(path, stamp);
    let data = base64::engine::general_purpose::STANDARD.encode(&bytes);
    Ok(Rich { text, attachments: vec![ContentBlock::Document { source: MediaSource::base64(media_type, data) }] })
}

/// Runs `f` over `bytes` on a blocking thread; a panic in the parser is an error.
async fn blocking<T: Send + 'static>(
    bytes: Vec<u8>,
    f: impl FnOnce(&[u8]) -> Result<T, String> + Send + 'static,
) -> Result<T, String> {
    tokio::task::spawn_blocking(move || f(&bytes))
        .await
        .unwrap_or_else(|_| Err("the PDF parser failed on this file".to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::HostRequest;
    use crate::tools::host::HostTools;
    use crate::tools::{Session, core_tools};
    use serde_json::json;
    use std::sync::Arc;
    use tokio_util::sync::CancellationToken;

    /// A 1x1 transparent PNG.
    const PNG: &[u8] = &[
        0x89, 0x50, 0x4E, 0x47, 0x0D, 0x0A, 0x1A, 0x0A, 0x00, 0x00, 0x00, 0x0D, 0x49, 0x48, 0x44, 0x52, 0x00, 0x00,
        0x00, 0x01, 0x00, 0x00, 0x00, 0x01, 0x08, 0x06, 0x00, 0x00, 0x00, 0x1F, 0x15, 0xC4, 0x89, 0x00, 0x00, 0x00,
        0x0A, 0x49, 0x44, 0x41, 0x54, 0x78, 0x9C, 0x63, 0x00, 0x01, 0x00, 0x00, 0x05, 0x00, 0x01, 0x0D, 0x0A, 0x2D,
        0xB4, 0x00, 0x00, 0x00, 0x00, 0x49, 0x45, 0x4E, 0x44, 0xAE, 0x42, 0x60, 0x82,
    ];

    const PDF: &[u8] = b"%PDF-1.4\n1 0 obj << /Type /Catalog /Pages 2 0 R >> endobj\n\
2 0 obj << /Type /Pages /Kids [] /Count 0 >> endobj\ntrailer << /Root 1 0 R >>\n%%EOF\n";

    #[test]
    fn sniffs_the_four_image_kinds_and_pdf() {
        assert_eq!(sniff(PNG), Some("image/png"));
        assert_eq!(sniff(&[0xFF, 0xD8, 0xFF, 0xE0, 0, 0x10]), Some("image/jpeg"));
        assert_eq!(sniff(b"GIF89a\x01\x00"), Some("image/gif"));
        assert_eq!(sniff(b"RIFF\x24\x00\x00\x00WEBPVP8 "), Some("image/webp"));
        assert_eq!(sniff(PDF), Some("application/pdf"));
        assert_eq!(sniff(b"RIFF\x24\x00\x00\x00WAVEfmt "), None);
        assert_eq!(sniff(b"fn main() {}\n"), None);
    }

    async fn read_via_host(dir: &Path, name: &str) -> crate::tool::ToolOutput {
        let host = HostTools::new(core_tools(), Arc::new(Session::new(dir)));
        // The input Claude Code's model sends to Read.
        host.run(HostRequest::tool("Read", json!({ "file_path": dir.join(name) })), CancellationToken::new()).await
    }

    #[tokio::test]
    async fn an_image_comes_back_as_an_image_block_on_the_wire() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("pixel.png"), PNG).unwrap();
        let out = read_via_host(dir.path(), "pixel.png").await;
        assert!(!out.is_error, "{}", out.content);
        let data = base64::engine::general_purpose::STANDARD.encode(PNG);
        assert_eq!(
            out.attachments,
            vec![ContentBlock::Image { source: MediaSource::base64("image/png", data.clone()) }]
        );
        // Through the tool host's JSON and into the Anthropic request shape.
        let wire: crate::tool::ToolOutput = serde_json::from_value(serde_json::to_value(&out).unwrap()).unwrap();
        let block = ContentBlock::tool_result_with("t1", wire.content, false, wire.attachments);
        let json = serde_json::to_value(&block).unwrap();
        assert_eq!(json["type"], "tool_result");
        assert_eq!(json["content"][0]["type"], "text");
        assert_eq!(
            json["content"][1],
            json!({ "type": "image", "source": { "type": "base64", "media_type": "image/png", "data": data } })
        );
        // And back: a history read from disk keeps the image.
        let back: ContentBlock = serde_json::from_value(json).unwrap();
        assert_eq!(back, block);
    }

    #[tokio::test]
    async fn a_pdf_is_a_document_block_and_text_files_stay_text() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("doc.pdf"), PDF).unwrap();
        std::fs::write(dir.path().join("a.txt"), "hello\n").unwrap();
        let out = read_via_host(dir.path(), "doc.pdf").await;
        assert!(!out.is_error, "{}", out.content);
        assert!(
            matches!(&out.attachments[..], [ContentBlock::Document { source }] if source.media_type == "application/pdf")
        );
        let out = read_via_host(dir.path(), "a.txt").await;
        assert!(out.attachments.is_empty());
        assert!(out.content.contains("hello"));
        // A plain tool result still goes out as a string.
        let json = serde_json::to_value(ContentBlock::tool_result("t", "x", false)).unwrap();
        assert_eq!(json, json!({ "type": "tool_result", "tool_use_id": "t", "content": "x" }));
    }

    #[tokio::test]
    async fn an_image_over_the_limit_is_a_clear_error() {
        let dir = tempfile::tempdir().unwrap();
        let mut big = PNG.to_vec();
        big.resize(MAX_IMAGE_BYTES as usize + 1, 0);
        std::fs::write(dir.path().join("big.png"), big).unwrap();
        let out = read_via_host(dir.path(), "big.png").await;
        assert!(out.is_error);
        assert!(out.content.contains("more than the"), "{}", out.content);
        assert!(out.attachments.is_empty());
    }

    async fn read_pages(dir: &Path, name: &str, pages: &str) -> crate::tool::ToolOutput {
        let host = HostTools::new(core_tools(), Arc::new(Session::new(dir)));
        // The input Claude Code's model sends to Read for part of a PDF.
        let input = json!({ "file_path": dir.join(name), "pages": pages });
        host.run(HostRequest::tool("Read", input), CancellationToken::new()).await
    }

    fn document_bytes(out: &crate::tool::ToolOutput) -> Vec<u8> {
        match &out.attachments[..] {
            [ContentBlock::Document { source }] => {
                assert_eq!(source.media_type, "application/pdf");
                base64::engine::general_purpose::STANDARD.decode(&source.data).unwrap()
            }
            other => panic!("not one document block: {other:?}"),
        }
    }

    #[tokio::test]
    async fn a_page_range_sends_only_those_pages() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("long.pdf"), pdf::tests::make_pdf(12)).unwrap();
        std::fs::write(dir.path().join("short.pdf"), pdf::tests::make_pdf(3)).unwrap();
        // Past ten pages, a PDF needs a range.
        let out = read_via_host(dir.path(), "long.pdf").await;
        assert!(out.is_error && out.attachments.is_empty());
        assert!(out.content.contains("12 pages") && out.content.contains("`pages`"), "{}", out.content);
        let out = read_pages(dir.path(), "long.pdf", "2-3").await;
        assert!(!out.is_error, "{}", out.content);
        assert!(out.content.contains("12 pages; pages 2-3"), "{}", out.content);
        assert_eq!(pdf::tests::page_texts(&document_bytes(&out)), vec!["PAGE-2", "PAGE-3"]);
        let out = read_pages(dir.path(), "long.pdf", "12").await;
        assert_eq!(pdf::tests::page_texts(&document_bytes(&out)), vec!["PAGE-12"]);
        // A short one goes whole without a range.
        let out = read_via_host(dir.path(), "short.pdf").await;
        assert!(!out.is_error, "{}", out.content);
        assert_eq!(pdf::tests::page_texts(&document_bytes(&out)), vec!["PAGE-1", "PAGE-2", "PAGE-3"]);
        // Ranges past the end, and on files that are no PDF, are errors that say why.
        let out = read_pages(dir.path(), "short.pdf", "5-6").await;
        assert!(out.is_error && out.content.contains("3 pages"), "{}", out.content);
        let out = read_pages(dir.path(), "long.pdf", "1-25").await;
        assert!(out.is_error && out.content.contains("more than the 20"), "{}", out.content);
        std::fs::write(dir.path().join("a.txt"), "hello\n").unwrap();
        let out = read_pages(dir.path(), "a.txt", "1").await;
        assert!(out.is_error && out.content.contains("PDF files only"), "{}", out.content);
        std::fs::write(dir.path().join("pixel.png"), PNG).unwrap();
        let out = read_pages(dir.path(), "pixel.png", "1").await;
        assert!(out.is_error && out.content.contains("PDF files only"), "{}", out.content);
        // A file that only looks like a PDF cannot be cut.
        std::fs::write(dir.path().join("fake.pdf"), b"%PDF-1.4\nnothing here\n").unwrap();
        let out = read_pages(dir.path(), "fake.pdf", "1").await;
        assert!(out.is_error && out.content.contains("cannot take pages 1-1"), "{}", out.content);
    }
}
