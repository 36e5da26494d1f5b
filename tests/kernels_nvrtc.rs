//! The GPU kernels' CUDA sources (the reduction and view pack kernels of the device backends and
//! the distributed-array kernels) compile with NVRTC (no GPU needed). CI installs
//! NVRTC from PyPI (nvidia-cuda-nvrtc-cu12) and points GPUWIRE_NVRTC_REQUIRED=1 at it; where
//! NVRTC is absent and not required, the test says so loudly instead of passing silently.

#[test]
fn kernel_source_compiles_for_hopper_and_ampere() {
    match gpuwire::device::kernels::nvrtc_available() {
        Ok(()) => {
            for arch in ["compute_80", "compute_90"] {
                let ptx = gpuwire::device::kernels::ptx_for(arch).unwrap_or_else(|e| panic!("{arch}: {e}"));
                assert!(ptx.len() > 1000, "PTX for {arch} is {} bytes", ptx.len());
                for name in gpuwire::device::kernels::pack_kernel_names() {
                    assert!(ptx.contains(&format!(".entry {name}(")), "PTX for {arch} lacks the view pack kernel {name}");
                }
                for name in gpuwire::device::kernels::ipc_kernel_names() {
                    assert!(ptx.contains(&format!(".entry {name}(")), "PTX for {arch} lacks the IPC kernel {name}");
                }
                let ptx = gpuwire::device::array_kernels::compile_ptx_for(arch).unwrap_or_else(|e| panic!("array kernels, {arch}: {e}"));
                for name in gpuwire::device::array_kernels::names() {
                    assert!(ptx.contains(&format!(".entry {name}(")), "array-kernel PTX for {arch} lacks the entry {name}");
                }
            }
        }
        Err(why) => {
            if std::env::var("GPUWIRE_NVRTC_REQUIRED").as_deref() == Ok("1") {
                panic!("GPUWIRE_NVRTC_REQUIRED=1 but {why}");
            }
            eprintln!("NOT CHECKED: kernel source compile ({why}); set LD_LIBRARY_PATH to an NVRTC and GPUWIRE_NVRTC_REQUIRED=1");
        }
    }
}
