//! Who shares a GPU: one exchange of every rank's device UUID (and host name), which AUTO's
//! choice (`backend::choose`) and the device state (`devstate`) both ask.

use std::ffi::{c_char, c_int};

use crate::comm::Communicator;
use crate::error::Result;
use crate::mpisys::{self, sys};

/// Collective over `c`: whether two ranks use one GPU, and which (the first pair), from every
/// rank's device UUID (and host name, for the message). The UUID alone decides: a GPU's UUID is
/// unique across machines, so two ranks that report one UUID share that GPU whatever their host
/// names say (containers or pods with host names of their own on one machine). A rank without a
/// device shares nothing.
pub fn shared_gpus(c: &Communicator, device: Option<i32>) -> Result<Option<String>> {
    let mut mine = [0u8; REC];
    let mut host = [0 as c_char; HOST];
    // SAFETY: writes at most HOST - 1 bytes; the last stays NUL.
    unsafe { libc::gethostname(host.as_mut_ptr(), HOST - 1) };
    for (i, b) in host.iter().enumerate() {
        mine[i] = *b as u8;
    }
    if let Some(u) = device.and_then(|d| cudarc::driver::result::device::get(d).and_then(cudarc::driver::result::device::get_uuid).ok()) {
        mine[HOST] = 1;
        for (i, b) in u.bytes.iter().enumerate() {
            mine[HOST + 1 + i] = *b as u8;
        }
    }
    let p = c.size() as usize;
    let mut all = vec![0u8; p * REC];
    // SAFETY: fixed-size records, one per rank.
    mpisys::check(
        unsafe { sys::MPI_Allgather(mine.as_ptr().cast(), REC as c_int, sys::RSMPI_UINT8_T, all.as_mut_ptr().cast(), REC as c_int, sys::RSMPI_UINT8_T, c.raw()) },
        "MPI_Allgather (host and device of every rank)",
    )?;
    let recs: Vec<&[u8]> = all.chunks(REC).collect();
    Ok(first_sharing_pair(&recs).map(|(a, b)| {
        let name = |r: &[u8]| String::from_utf8_lossy(&r[..HOST]).trim_end_matches('\0').to_string();
        let (ha, hb) = (name(recs[a]), name(recs[b]));
        let uuid: String = recs[a][HOST + 1..].iter().map(|x| format!("{x:02x}")).collect();
        let hosts = if ha == hb { format!("host {ha}") } else { format!("host names {ha} and {hb}, one machine") };
        format!("ranks {a} and {b} share one GPU ({hosts}, GPU-{uuid}); NCCL needs a GPU per rank")
    }))
}

/// Host name bytes of a rank's record in `shared_gpus` (NUL-padded).
const HOST: usize = 64;
/// One record per rank: the host name, 1 if a UUID follows (else 0), the device UUID.
const REC: usize = HOST + 1 + 16;

/// The first pair of ranks (a < b) whose records (`REC` bytes each) carry one device UUID, by
/// the UUID alone (not the host name); ranks without a device share nothing.
fn first_sharing_pair(recs: &[&[u8]]) -> Option<(usize, usize)> {
    let uuids: Vec<Option<&[u8]>> = recs.iter().map(|r| (r[HOST] == 1).then(|| &r[HOST + 1..REC])).collect();
    for (a, ua) in uuids.iter().enumerate() {
        let Some(ua) = ua else { continue };
        for (b, ub) in uuids.iter().enumerate().skip(a + 1) {
            if *ub == Some(*ua) {
                return Some((a, b));
            }
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::{HOST, REC, first_sharing_pair};

    /// A rank's record: host name, then the UUID (16 times `gpu`) or no device.
    fn rec(host: &str, gpu: Option<u8>) -> Vec<u8> {
        let mut r = vec![0u8; REC];
        r[..host.len()].copy_from_slice(host.as_bytes());
        if let Some(g) = gpu {
            r[HOST] = 1;
            r[HOST + 1..].fill(g);
        }
        r
    }

    fn pair(recs: &[Vec<u8>]) -> Option<(usize, usize)> {
        first_sharing_pair(&recs.iter().map(|r| &r[..]).collect::<Vec<_>>())
    }

    #[test]
    fn one_uuid_is_one_gpu_whatever_the_host_names() {
        // Two containers of one machine, each with its own host name, on one GPU: shared.
        assert_eq!(pair(&[rec("pod-a", Some(7)), rec("pod-b", Some(7))]), Some((0, 1)));
        assert_eq!(pair(&[rec("a", Some(1)), rec("b", Some(2)), rec("c", Some(3)), rec("d", Some(2))]), Some((1, 3)));
        // One host name, one GPU: shared; one host name, two GPUs: not.
        assert_eq!(pair(&[rec("n0", Some(5)), rec("n0", Some(5))]), Some((0, 1)));
        assert_eq!(pair(&[rec("n0", Some(5)), rec("n0", Some(6))]), None);
        // Ranks without a device (an all-zero UUID field) share nothing, whatever the host.
        assert_eq!(pair(&[rec("n0", None), rec("n0", None), rec("n1", Some(0))]), None);
        assert_eq!(pair(&[rec("n0", None), rec("n1", Some(0))]), None);
        assert_eq!(pair(&[]), None);
    }
}
