//! Copying a branch's new objects from one repository into another as one pack: from an
//! agent's repository into the run clone after each commit, and from the run clone into
//! the user's repository at the end. Both sides borrow the user's store, so only what
//! the branch added since the commits in `hide` is copied.

use git2::{Oid, Repository};

use super::{Context as _, Result, io_err};

/// Writes into `to`'s object store every object reachable from `tip` in `from` and not
/// from the commits of `hide` (ids `from` cannot read are skipped). Returns how many
/// objects were copied (0 writes nothing).
pub(super) fn copy_objects(from: &Repository, to: &Repository, tip: Oid, hide: &[Oid], what: &str) -> Result<usize> {
    let mut walk = from.revwalk().git(|| format!("start a revision walk for {what}"))?;
    walk.push(tip).git(|| format!("walk {what}"))?;
    for commit in hide {
        if from.find_commit(*commit).is_ok() {
            walk.hide(*commit).git(|| format!("walk {what}"))?;
        }
    }
    let mut pack = from.packbuilder().git(|| format!("start a pack for {what}"))?;
    pack.insert_walk(&mut walk).git(|| format!("collect the objects of {what}"))?;
    let objects = pack.object_count();
    if objects > 0 {
        let mut buf = git2::Buf::new();
        pack.write_buf(&mut buf).git(|| format!("pack the objects of {what}"))?;
        let odb = to.odb().git(|| format!("open the object store that receives {what}"))?;
        let mut writer = odb.packwriter().git(|| format!("write the pack of {what}"))?;
        std::io::Write::write_all(&mut writer, &buf).map_err(io_err("write a pack into", to.path()))?;
        writer.commit().git(|| format!("index the pack of {what}"))?;
    }
    Ok(objects)
}
