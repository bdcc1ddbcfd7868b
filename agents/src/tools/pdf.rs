//! PDF page ranges for `Read`: the `pages` grammar Claude Code's model sends (`"3"`,
//! `"1-5"`), counting a PDF's pages, and cutting a PDF down to a range with `lopdf`
//! (the pages outside it deleted, the objects only they used pruned). Parsing runs on a
//! blocking thread of the tool host, so a malformed file costs that call only.

use lopdf::Document;

/// The most pages one `Read` sends (Claude Code's limit).
pub const MAX_PAGES_PER_READ: u32 = 20;

/// A PDF with more pages than this must be read with `pages`.
pub const MAX_PAGES_WITHOUT_RANGE: u32 = 10;

/// An inclusive range of pages, counting from 1.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PageRange {
    pub first: u32,
    pub last: u32,
}

impl PageRange {
    /// Parses `"N"` or `"N-M"` (spaces allowed around the parts). The error says what
    /// is wrong and what to send instead.
    pub fn parse(text: &str) -> Result<PageRange, String> {
        let bad = || {
            format!(
                "pages `{text}` is not a page range; give one page (\"3\") or a range (\"1-5\"), counting from 1, \
                 at most {MAX_PAGES_PER_READ} pages"
            )
        };
        let number = |s: &str| s.trim().parse::<u32>().ok().filter(|n| *n >= 1);
        let (first, last) = match text.split_once('-') {
            Some((a, b)) => (number(a).ok_or_else(bad)?, number(b).ok_or_else(bad)?),
            None => {
                let n = number(text).ok_or_else(bad)?;
                (n, n)
            }
        };
        if last < first {
            return Err(format!(
                "pages `{text}` ends before it starts; give the lower page first (\"{last}-{first}\")"
            ));
        }
        if last - first + 1 > MAX_PAGES_PER_READ {
            return Err(format!(
                "pages `{text}` covers {} pages, more than the {MAX_PAGES_PER_READ} one Read may send; read it in \
                 parts (\"{first}-{}\" first)",
                last - first + 1,
                first + MAX_PAGES_PER_READ - 1
            ));
        }
        Ok(PageRange { first, last })
    }
}

/// What [`cut`] made.
#[derive(Debug)]
pub struct Cut {
    /// The PDF holding only the pages of the range.
    pub bytes: Vec<u8>,
    /// The pages the original has.
    pub total: u32,
    /// The range sent (its end lowered to the last page when it went past it).
    pub sent: PageRange,
}

/// The number of pages of the PDF `bytes`.
pub fn page_count(bytes: &[u8]) -> Result<u32, String> {
    let doc = Document::load_mem(bytes).map_err(|e| format!("cannot read its page tree: {e}"))?;
    u32::try_from(doc.get_pages().len()).map_err(|_| "it has too many pages to count".to_string())
}

/// The PDF `bytes` cut down to `range`.
pub fn cut(bytes: &[u8], range: PageRange) -> Result<Cut, String> {
    let mut doc = Document::load_mem(bytes).map_err(|e| format!("cannot read its page tree: {e}"))?;
    let pages: Vec<u32> = doc.get_pages().keys().copied().collect();
    let total = u32::try_from(pages.len()).map_err(|_| "it has too many pages to count".to_string())?;
    if range.first > total {
        return Err(format!(
            "it has {total} page{}, so page {} does not exist; ask for pages 1-{}",
            if total == 1 { "" } else { "s" },
            range.first,
            total.min(MAX_PAGES_PER_READ)
        ));
    }
    let sent = PageRange { first: range.first, last: range.last.min(total) };
    let drop: Vec<u32> = pages.into_iter().filter(|p| *p < sent.first || *p > sent.last).collect();
    if !drop.is_empty() {
        doc.delete_pages(&drop);
        doc.prune_objects();
    }
    let mut out = Vec::new();
    doc.save_to(&mut out).map_err(|e| format!("cannot write the selected pages: {e}"))?;
    Ok(Cut { bytes: out, total, sent })
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use lopdf::content::{Content, Operation};
    use lopdf::{Object, Stream, dictionary};

    /// A PDF of `pages` pages; page n shows the text `PAGE-n` (uncompressed).
    pub(crate) fn make_pdf(pages: u32) -> Vec<u8> {
        let mut doc = Document::with_version("1.5");
        let pages_id = doc.new_object_id();
        let font_id = doc.add_object(dictionary! {
            "Type" => "Font", "Subtype" => "Type1", "BaseFont" => "Courier",
        });
        let resources_id = doc.add_object(dictionary! { "Font" => dictionary! { "F1" => font_id } });
        let mut kids = Vec::new();
        for n in 1..=pages {
            let content = Content {
                operations: vec![
                    Operation::new("BT", vec![]),
                    Operation::new("Tf", vec!["F1".into(), 24.into()]),
                    Operation::new("Td", vec![100.into(), 600.into()]),
                    Operation::new("Tj", vec![Object::string_literal(format!("PAGE-{n}"))]),
                    Operation::new("ET", vec![]),
                ],
            };
            let content_id = doc.add_object(Stream::new(dictionary! {}, content.encode().unwrap()));
            let page_id = doc.add_object(dictionary! {
                "Type" => "Page", "Parent" => pages_id, "Contents" => content_id,
            });
            kids.push(page_id.into());
        }
        doc.objects.insert(
            pages_id,
            Object::Dictionary(dictionary! {
                "Type" => "Pages",
                "Kids" => kids,
                "Count" => pages as i64,
                "Resources" => resources_id,
                "MediaBox" => vec![0.into(), 0.into(), 595.into(), 842.into()],
            }),
        );
        let catalog_id = doc.add_object(dictionary! { "Type" => "Catalog", "Pages" => pages_id });
        doc.trailer.set("Root", catalog_id);
        let mut out = Vec::new();
        doc.save_to(&mut out).unwrap();
        out
    }

    /// The `PAGE-n` texts a PDF shows, in page order.
    pub(crate) fn page_texts(bytes: &[u8]) -> Vec<String> {
        let doc = Document::load_mem(bytes).unwrap();
        doc.get_pages()
            .values()
            .map(|id| {
                let content = doc.get_page_content(*id);
                let text = String::from_utf8_lossy(&content).into_owned();
                let start = text.find("PAGE-").unwrap();
                text[start..].split(')').next().unwrap().to_string()
            })
            .collect()
    }

    #[test]
    fn ranges_parse_as_claude_code_sends_them() {
        assert_eq!(PageRange::parse("3"), Ok(PageRange { first: 3, last: 3 }));
        assert_eq!(PageRange::parse("1-5"), Ok(PageRange { first: 1, last: 5 }));
        assert_eq!(PageRange::parse(" 10 - 20 "), Ok(PageRange { first: 10, last: 20 }));
        for bad in ["", "0", "a", "1-", "-3", "2-0", "1,2", "1-2-3"] {
            assert!(PageRange::parse(bad).is_err(), "{bad}");
        }
        assert!(PageRange::parse("5-2").unwrap_err().contains("\"2-5\""));
        let too_many = PageRange::parse("1-21").unwrap_err();
        assert!(too_many.contains("21 pages") && too_many.contains("\"1-20\""), "{too_many}");
    }

    #[test]
    fn a_cut_keeps_exactly_the_pages_of_the_range() {
        let pdf = make_pdf(6);
        assert_eq!(page_count(&pdf), Ok(6));
        let cut = cut(&pdf, PageRange { first: 2, last: 4 }).unwrap();
        assert_eq!((cut.total, cut.sent), (6, PageRange { first: 2, last: 4 }));
        assert_eq!(page_texts(&cut.bytes), vec!["PAGE-2", "PAGE-3", "PAGE-4"]);
        assert!(cut.bytes.len() < pdf.len());
        let one = super::cut(&pdf, PageRange { first: 6, last: 6 }).unwrap();
        assert_eq!(page_texts(&one.bytes), vec!["PAGE-6"]);
        // Past the end: the range stops at the last page.
        let tail = super::cut(&pdf, PageRange { first: 5, last: 9 }).unwrap();
        assert_eq!(tail.sent, PageRange { first: 5, last: 6 });
        assert_eq!(page_texts(&tail.bytes), vec!["PAGE-5", "PAGE-6"]);
        let none = super::cut(&pdf, PageRange { first: 7, last: 8 }).unwrap_err();
        assert!(none.contains("6 pages") && none.contains("1-6"), "{none}");
        assert!(super::cut(b"%PDF-1.4\nnot really", PageRange { first: 1, last: 1 }).is_err());
    }
}
