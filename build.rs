//! Build script: compiles the small MPI shim with the MPI C compiler, sets the shared library's
//! soname, and generates `include/gpuwire.h` with cbindgen.

use std::env;
use std::path::PathBuf;

fn main() {
    println!("cargo:rerun-if-changed=src/shim.c");
    println!("cargo:rerun-if-changed=cbindgen.toml");
    println!("cargo:rerun-if-changed=src");
    println!("cargo:rerun-if-env-changed=MPICC");
    // cfg(cbindgen) marks items that only cbindgen reads (the C handle structs, src/ffi/mod.rs).
    println!("cargo::rustc-check-cfg=cfg(cbindgen)");

    // MPI shim: MPI_IN_PLACE and friends are macros whose values differ between MPIs.
    let mpi = build_probe_mpi::probe().unwrap_or_else(|errs| {
        for e in errs {
            println!("cargo:warning=MPI probe: {e}");
        }
        panic!("gpuwire needs an MPI installation (Debian/Ubuntu: apt-get install libopenmpi-dev openmpi-bin)");
    });
    let mut cc = cc::Build::new();
    cc.file("src/shim.c");
    if let Some(mpicc) = &mpi.mpicc {
        cc.compiler(mpicc);
    }
    for inc in &mpi.include_paths {
        cc.include(inc);
    }
    cc.compile("gpuwire_shim");

    // cfg(mpich): built against MPICH (`backend::p2p::through_scratch`), as its mpi.h says.
    println!("cargo::rustc-check-cfg=cfg(mpich)");
    let probe = PathBuf::from(env::var("OUT_DIR").unwrap()).join("flavour.c");
    std::fs::write(&probe, "#include <mpi.h>\n#ifdef MPICH_VERSION\ngpuwire_built_with_mpich\n#endif\n").unwrap();
    let mut pp = cc::Build::new();
    pp.file(&probe);
    if let Some(mpicc) = &mpi.mpicc {
        pp.compiler(mpicc);
    }
    for inc in &mpi.include_paths {
        pp.include(inc);
    }
    match pp.try_expand() {
        Ok(out) if String::from_utf8_lossy(&out).contains("gpuwire_built_with_mpich") => println!("cargo:rustc-cfg=mpich"),
        Ok(_) => {}
        Err(e) => println!("cargo:warning=MPI flavour probe: {e}"),
    }

    let version = env::var("CARGO_PKG_VERSION").unwrap();
    let major = env::var("CARGO_PKG_VERSION_MAJOR").unwrap();
    let minor = env::var("CARGO_PKG_VERSION_MINOR").unwrap();
    let patch = env::var("CARGO_PKG_VERSION_PATCH").unwrap();

    // The shared library's soname. Under Cargo's semantic versioning 0.MINOR is the
    // compatibility boundary for 0.x (0.1.x releases are compatible with each other, 0.2 is
    // not), and MAJOR from 1.0 on; the soname follows it: libgpuwire.so.0.1 for 0.1.x,
    // libgpuwire.so.1 for 1.x. Programs linked against libgpuwire.so record this name
    // (NEEDED), so a directory they run from needs a libgpuwire.so.0.1 beside libgpuwire.so
    // (scripts/soname-link.sh makes that link in the build tree; `make install` installs
    // libgpuwire.so.0.1.0 with both links).
    let soname = if major == "0" {
        format!("libgpuwire.so.0.{minor}")
    } else {
        format!("libgpuwire.so.{major}")
    };
    let target_os = env::var("CARGO_CFG_TARGET_OS").unwrap_or_default();
    if target_os == "linux" || target_os.ends_with("bsd") {
        println!("cargo:rustc-cdylib-link-arg=-Wl,-soname,{soname}");
    }

    // The C header. It is committed; CI checks that a build leaves it unchanged.
    let crate_dir = PathBuf::from(env::var("CARGO_MANIFEST_DIR").unwrap());
    let mut config = cbindgen::Config::from_file(crate_dir.join("cbindgen.toml"))
        .expect("cbindgen.toml is readable");
    let handles = config.after_includes.take().unwrap_or_default();
    config.after_includes = Some(format!(
        "\n/** Version of the gpuwire headers (also returned by gpuwire_get_version at run time). */\n\
         #define GPUWIRE_VERSION_MAJOR {major}\n\
         #define GPUWIRE_VERSION_MINOR {minor}\n\
         #define GPUWIRE_VERSION_PATCH {patch}\n\
         #define GPUWIRE_VERSION_STRING \"{version}\"\n{handles}\n"
    ));
    match cbindgen::Builder::new()
        .with_crate(&crate_dir)
        .with_config(config)
        .generate()
    {
        Ok(bindings) => {
            bindings.write_to_file(crate_dir.join("include/gpuwire.h"));
        }
        Err(e) => panic!("cbindgen could not generate include/gpuwire.h: {e}"),
    }
}
