//! Elementwise reductions on host memory.
//!
//! Used where MPI cannot reduce a type itself (float16 and bfloat16, through user-defined MPI
//! operations), for the division step of AVG, and by tests as the independent reference.
//! Semantics: integers wrap on overflow; float16/bfloat16 compute each step in float32 and round
//! the result to the nearest representable value (ties to even); complex PROD is the complex
//! product; AVG is the sum divided by the number of ranks (integers truncate toward zero);
//! LAND/LOR/LXOR give 1 or 0; MINLOC/MAXLOC take the smaller/larger value of a (value, index)
//! pair, the lower index of equal values (as MPI).

use half::{bf16, f16};

use crate::error::{Error, Result};
use crate::types::{Dtype, ReduceOp};

/// `inout[i] = input[i] op inout[i]` for `n` elements of `dtype` (the MPI user-function order).
/// AVG combines as SUM; divide afterwards with [`divide`].
///
/// # Safety
/// `inout` and `input` must be valid for `n` elements of `dtype` and suitably aligned for it (or
/// `n` must be 0).
pub unsafe fn combine(dtype: Dtype, op: ReduceOp, inout: *mut u8, input: *const u8, n: usize) -> Result<()> {
    op.check_supported(dtype)?;
    if n == 0 {
        return Ok(());
    }
    macro_rules! int {
        ($t:ty) => {{
            // SAFETY: caller guarantees validity and alignment.
            let (a, b) = unsafe { (std::slice::from_raw_parts_mut(inout as *mut $t, n), std::slice::from_raw_parts(input as *const $t, n)) };
            match op {
                ReduceOp::GPUWIRE_SUM | ReduceOp::GPUWIRE_AVG => a.iter_mut().zip(b).for_each(|(x, y)| *x = y.wrapping_add(*x)),
                ReduceOp::GPUWIRE_PROD => a.iter_mut().zip(b).for_each(|(x, y)| *x = y.wrapping_mul(*x)),
                ReduceOp::GPUWIRE_MAX => a.iter_mut().zip(b).for_each(|(x, y)| *x = (*y).max(*x)),
                ReduceOp::GPUWIRE_MIN => a.iter_mut().zip(b).for_each(|(x, y)| *x = (*y).min(*x)),
                ReduceOp::GPUWIRE_BAND => a.iter_mut().zip(b).for_each(|(x, y)| *x &= *y),
                ReduceOp::GPUWIRE_BOR => a.iter_mut().zip(b).for_each(|(x, y)| *x |= *y),
                ReduceOp::GPUWIRE_BXOR => a.iter_mut().zip(b).for_each(|(x, y)| *x ^= *y),
                ReduceOp::GPUWIRE_LAND => a.iter_mut().zip(b).for_each(|(x, y)| *x = (*y != 0 && *x != 0) as $t),
                ReduceOp::GPUWIRE_LOR => a.iter_mut().zip(b).for_each(|(x, y)| *x = (*y != 0 || *x != 0) as $t),
                ReduceOp::GPUWIRE_LXOR => a.iter_mut().zip(b).for_each(|(x, y)| *x = ((*y != 0) != (*x != 0)) as $t),
                ReduceOp::GPUWIRE_MINLOC | ReduceOp::GPUWIRE_MAXLOC => unreachable!("MINLOC/MAXLOC are rejected for integers"),
            }
        }};
    }
    macro_rules! float {
        ($t:ty, $to:expr, $from:expr) => {{
            // SAFETY: caller guarantees validity and alignment.
            let (a, b) = unsafe { (std::slice::from_raw_parts_mut(inout as *mut $t, n), std::slice::from_raw_parts(input as *const $t, n)) };
            let f = |y: $t, x: $t| -> $t {
                let (y, x) = ($to(y), $to(x));
                $from(match op {
                    ReduceOp::GPUWIRE_SUM | ReduceOp::GPUWIRE_AVG => y + x,
                    ReduceOp::GPUWIRE_PROD => y * x,
                    ReduceOp::GPUWIRE_MAX => if y > x || x.is_nan() { y } else { x },
                    ReduceOp::GPUWIRE_MIN => if y < x || x.is_nan() { y } else { x },
                    _ => unreachable!("bitwise and logical ops are rejected for floating point"),
                })
            };
            a.iter_mut().zip(b).for_each(|(x, y)| *x = f(*y, *x));
        }};
    }
    macro_rules! complex {
        ($t:ty) => {{
            // SAFETY: caller guarantees validity and alignment; a complex is two reals.
            let (a, b) = unsafe { (std::slice::from_raw_parts_mut(inout as *mut $t, 2 * n), std::slice::from_raw_parts(input as *const $t, 2 * n)) };
            for (x, y) in a.chunks_exact_mut(2).zip(b.chunks_exact(2)) {
                let (xr, xi, yr, yi) = (x[0], x[1], y[0], y[1]);
                match op {
                    ReduceOp::GPUWIRE_SUM | ReduceOp::GPUWIRE_AVG => { x[0] = yr + xr; x[1] = yi + xi; }
                    ReduceOp::GPUWIRE_PROD => { x[0] = yr * xr - yi * xi; x[1] = yr * xi + yi * xr; }
                    _ => unreachable!("MIN/MAX/bitwise are rejected for complex"),
                }
            }
        }};
    }
    macro_rules! pair {
        ($t:ty) => {{
            // SAFETY: caller guarantees validity and alignment; a pair is a value then an i32
            // index at offset size_of::<$t>() (then padding up to the pair's size).
            let es = dtype.size();
            for k in 0..n {
                let (x, y) = unsafe { (inout.add(k * es), input.add(k * es)) };
                let (xv, yv) = unsafe { ((x as *const $t).read(), (y as *const $t).read()) };
                let off = std::mem::size_of::<$t>();
                let (xi, yi) = unsafe { ((x.add(off) as *const i32).read(), (y.add(off) as *const i32).read()) };
                let y_wins = match op {
                    ReduceOp::GPUWIRE_MINLOC => yv < xv || (yv == xv && yi < xi),
                    ReduceOp::GPUWIRE_MAXLOC => yv > xv || (yv == xv && yi < xi),
                    _ => unreachable!("pairs take MINLOC/MAXLOC only"),
                };
                if y_wins {
                    unsafe { std::ptr::copy_nonoverlapping(y, x, off + 4) };
                }
            }
        }};
    }
    use Dtype::*;
    match dtype {
        GPUWIRE_FLOAT32_INT32 => pair!(f32),
        GPUWIRE_FLOAT64_INT32 => pair!(f64),
        GPUWIRE_INT32_INT32 => pair!(i32),
        GPUWIRE_INT8 => int!(i8),
        GPUWIRE_UINT8 => int!(u8),
        GPUWIRE_INT32 => int!(i32),
        GPUWIRE_UINT32 => int!(u32),
        GPUWIRE_INT64 => int!(i64),
        GPUWIRE_UINT64 => int!(u64),
        GPUWIRE_FLOAT16 => float!(f16, f32::from, f16::from_f32),
        GPUWIRE_BFLOAT16 => float!(bf16, f32::from, bf16::from_f32),
        GPUWIRE_FLOAT32 => float!(f32, |v| v, |v| v),
        GPUWIRE_FLOAT64 => float!(f64, |v| v, |v| v),
        GPUWIRE_COMPLEX64 => complex!(f32),
        GPUWIRE_COMPLEX128 => complex!(f64),
    }
    Ok(())
}

/// `buf[i] /= divisor` for `n` elements (the second step of AVG). Integers truncate toward zero;
/// float16/bfloat16 divide in float32 and round.
///
/// # Safety
/// `buf` must be valid for `n` elements of `dtype` and aligned for it (or `n` must be 0).
pub unsafe fn divide(dtype: Dtype, buf: *mut u8, n: usize, divisor: usize) -> Result<()> {
    if n == 0 || divisor == 1 {
        return Ok(());
    }
    if divisor == 0 {
        return Err(Error::Internal("AVG over zero ranks".into()));
    }
    macro_rules! each {
        ($t:ty, $k:expr, $f:expr) => {{
            // SAFETY: caller guarantees validity and alignment.
            let a = unsafe { std::slice::from_raw_parts_mut(buf as *mut $t, $k * n) };
            a.iter_mut().for_each(|x| *x = $f(*x));
        }};
    }
    use Dtype::*;
    let d = divisor;
    match dtype {
        GPUWIRE_INT8 => each!(i8, 1, |x: i8| (x as i64 / d as i64) as i8),
        GPUWIRE_UINT8 => each!(u8, 1, |x: u8| (x as u64 / d as u64) as u8),
        GPUWIRE_INT32 => each!(i32, 1, |x: i32| (x as i64 / d as i64) as i32),
        GPUWIRE_UINT32 => each!(u32, 1, |x: u32| (x as u64 / d as u64) as u32),
        GPUWIRE_INT64 => each!(i64, 1, |x: i64| x / d as i64),
        GPUWIRE_UINT64 => each!(u64, 1, |x: u64| x / d as u64),
        GPUWIRE_FLOAT16 => each!(f16, 1, |x: f16| f16::from_f32(f32::from(x) / d as f32)),
        GPUWIRE_BFLOAT16 => each!(bf16, 1, |x: bf16| bf16::from_f32(f32::from(x) / d as f32)),
        GPUWIRE_FLOAT32 | GPUWIRE_COMPLEX64 => each!(f32, if dtype.is_complex() { 2 } else { 1 }, |x: f32| x / d as f32),
        GPUWIRE_FLOAT64 | GPUWIRE_COMPLEX128 => each!(f64, if dtype.is_complex() { 2 } else { 1 }, |x: f64| x / d as f64),
        GPUWIRE_FLOAT32_INT32 | GPUWIRE_FLOAT64_INT32 | GPUWIRE_INT32_INT32 => return Err(Error::Internal("AVG of a pair datatype".into())),
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn complex_prod_is_complex_multiplication() {
        let mut a = [3.0f32, 4.0];
        let b = [1.0f32, 2.0];
        unsafe { combine(Dtype::GPUWIRE_COMPLEX64, ReduceOp::GPUWIRE_PROD, a.as_mut_ptr().cast(), b.as_ptr().cast(), 1).unwrap() };
        assert_eq!(a, [-5.0, 10.0]);
    }

    #[test]
    fn half_sum_in_f32_and_avg() {
        let mut a = [f16::from_f32(1.5); 4];
        let b = [f16::from_f32(1.5); 4];
        unsafe {
            combine(Dtype::GPUWIRE_FLOAT16, ReduceOp::GPUWIRE_SUM, a.as_mut_ptr().cast(), b.as_ptr().cast(), 4).unwrap();
            assert_eq!(a[3].to_f32(), 3.0);
            divide(Dtype::GPUWIRE_FLOAT16, a.as_mut_ptr().cast(), 4, 2).unwrap();
        }
        assert_eq!(a[0].to_f32(), 1.5);
    }

    #[test]
    fn integer_ops_wrap_and_bitwise() {
        let mut a = [200u8, 0b1100];
        let b = [100u8, 0b1010];
        unsafe { combine(Dtype::GPUWIRE_UINT8, ReduceOp::GPUWIRE_SUM, a.as_mut_ptr(), b.as_ptr(), 1).unwrap() };
        assert_eq!(a[0], 44);
        unsafe { combine(Dtype::GPUWIRE_UINT8, ReduceOp::GPUWIRE_BXOR, a.as_mut_ptr().add(1), b.as_ptr().add(1), 1).unwrap() };
        assert_eq!(a[1], 0b0110);
        let mut c = [-7i32];
        unsafe { divide(Dtype::GPUWIRE_INT32, c.as_mut_ptr().cast(), 1, 2).unwrap() };
        assert_eq!(c[0], -3);
    }

    #[test]
    fn logical_and_loc() {
        let mut a = [0i8, 3, -1, 0];
        let b = [5i8, 0, 7, 0];
        unsafe { combine(Dtype::GPUWIRE_INT8, ReduceOp::GPUWIRE_LOR, a.as_mut_ptr().cast(), b.as_ptr().cast(), 4).unwrap() };
        assert_eq!(a, [1, 1, 1, 0]);
        let mut a = [0u32, 3, 9];
        unsafe { combine(Dtype::GPUWIRE_UINT32, ReduceOp::GPUWIRE_LXOR, a.as_mut_ptr().cast(), [4u32, 4, 0].as_ptr().cast(), 3).unwrap() };
        assert_eq!(a, [1, 0, 1]);
        #[repr(C)]
        #[derive(Clone, Copy, Debug, PartialEq)]
        struct Di(f64, i32);
        // Ties: the lower index wins whichever operand holds it.
        let mut a = [Di(1.0, 5), Di(2.0, 1), Di(3.0, 4)];
        let b = [Di(1.0, 2), Di(2.0, 7), Di(0.5, 9)];
        unsafe { combine(Dtype::GPUWIRE_FLOAT64_INT32, ReduceOp::GPUWIRE_MINLOC, a.as_mut_ptr().cast(), b.as_ptr().cast(), 3).unwrap() };
        assert_eq!(a, [Di(1.0, 2), Di(2.0, 1), Di(0.5, 9)]);
        let mut a = [3i32, 8, 3, 2];
        unsafe { combine(Dtype::GPUWIRE_INT32_INT32, ReduceOp::GPUWIRE_MAXLOC, a.as_mut_ptr().cast(), [3i32, 1, 2, 0].as_ptr().cast(), 2).unwrap() };
        assert_eq!(a, [3, 1, 3, 2]);
    }

    #[test]
    fn unsupported_combinations_are_refused() {
        let mut a = [0f64; 2];
        let b = [0f64; 2];
        let r = unsafe { combine(Dtype::GPUWIRE_COMPLEX128, ReduceOp::GPUWIRE_MAX, a.as_mut_ptr().cast(), b.as_ptr().cast(), 1) };
        assert!(matches!(r, Err(Error::UnsupportedOp(_))));
    }
}
