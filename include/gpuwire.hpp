// gpuwire.hpp: the C++ interface of gpuwire (header-only, C++17; include it instead of gpuwire.h).
//
// A thin layer over the C API of gpuwire.h, which it includes:
//  - gpuwire::environment   gpuwire_init in its constructor, gpuwire_finalize in its destructor
//    (that of the environment that initialized gpuwire: a nested one does not finalize);
//  - gpuwire::comm, gpuwire::buffer, gpuwire::request, gpuwire::darray: RAII owners of the C
//    handles, move-only; the destructor frees the handle. A request's destructor never blocks:
//    it cancels a receive whose message has not matched (gpuwire_cancel: withdrawn, nothing
//    written; where its path can: see gpuwire_cancel) and frees the request (gpuwire_request_free), so that what was not cancelled (an
//    isend, a nonblocking collective, a receive already matched or on a path that cannot
//    withdraw it) goes on, as after MPI_Request_free. So an exception thrown while a request is
//    pending reaches its catch, and the communicator stays usable; wait() for requests whose
//    results you need. get() gives the C handle, release() gives it up; a default-constructed
//    or moved-from object holds the NULL handle;
//  - gpuwire::group: gpuwire_group_start / gpuwire_group_end around a scope (RAII);
//  - gpuwire::error: the exception every failing call throws, carrying the status code (code())
//    and the detailed message of gpuwire_last_error (what(), which names the C function);
//  - gpuwire::span<T>: a std::span-style view (pointer + element count) that converts from
//    std::vector, std::array, C arrays, std::span and anything with data() and size(), and (a
//    span of const T, as an argument) from a braced list: procs {0, 2}, widths {1, 0}; buffers
//    wrap spans, and buffer::host_span<T>() views a host buffer's memory as a span;
//  - gpuwire::darray: a distributed array (gpuwire_darray_*), with host data as spans and scalars
//    of its element type, checked against the array's datatype and global length.
//
// Datatypes come from the element type (gpuwire::dtype_v<T>): int8_t, uint8_t, int32_t,
// uint32_t, int64_t, uint64_t, float, double, std::complex<float>, std::complex<double>.
// Streams are CUstream values passed as void * (nullptr = the legacy default stream; ignored for
// host buffers), as in the C API. Semantics, thread safety and errors are the C functions'
// (see gpuwire.h): each method names the function it calls.
//
// Build: any C++17 compiler; link with -lgpuwire (no MPI header is needed). Every function of
// gpuwire.h is called here (scripts/check-bindings.py checks it).
#ifndef GPUWIRE_HPP
#define GPUWIRE_HPP

#include "gpuwire.h"

#include <complex>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <initializer_list>
#include <iterator>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

namespace gpuwire {

// ---- errors ------------------------------------------------------------------------------------

/** The static description of a status code (gpuwire_status_string). */
inline std::string status_string(gpuwire_status code)
{
    return gpuwire_status_string(static_cast<int32_t>(code));
}

/** The calling thread's last detailed error message (gpuwire_last_error); "" if none. */
inline std::string last_error()
{
    char buf[1024];
    if (gpuwire_last_error(buf, sizeof buf) != GPUWIRE_SUCCESS)
        return std::string();
    return std::string(buf);
}

/** What every failing call throws: the status code and the detailed message. */
class error : public std::runtime_error {
public:
    error(gpuwire_status code, const std::string &message, int32_t index = GPUWIRE_UNDEFINED)
        : std::runtime_error(message + " (status " + std::to_string(static_cast<int>(code)) +
                             ": " + status_string(code) + ")"),
          code_(code), index_(index)
    {
    }
    /** The gpuwire_status of the failed call. */
    gpuwire_status code() const noexcept { return code_; }
    /** From wait_any / test_any: the index of the request that failed (as MPI_Waitany's
     * `index`; that request is released); GPUWIRE_UNDEFINED where no request is named (an
     * argument error) and from every other call. */
    int32_t index() const noexcept { return index_; }

private:
    gpuwire_status code_;
    int32_t index_;
};

namespace detail {
/** Throws gpuwire::error with the thread's last error message unless `st` is success. */
inline void check(gpuwire_status st)
{
    if (st != GPUWIRE_SUCCESS)
        throw error(st, last_error());
}
} // namespace detail

// ---- datatypes ---------------------------------------------------------------------------------

/** The gpuwire_dtype of a C++ element type; undefined (a compile error) for other types. */
template <class T> struct dtype_of;
template <> struct dtype_of<int8_t> : std::integral_constant<gpuwire_dtype, GPUWIRE_INT8> {};
template <> struct dtype_of<uint8_t> : std::integral_constant<gpuwire_dtype, GPUWIRE_UINT8> {};
template <> struct dtype_of<int32_t> : std::integral_constant<gpuwire_dtype, GPUWIRE_INT32> {};
template <> struct dtype_of<uint32_t> : std::integral_constant<gpuwire_dtype, GPUWIRE_UINT32> {};
template <> struct dtype_of<int64_t> : std::integral_constant<gpuwire_dtype, GPUWIRE_INT64> {};
template <> struct dtype_of<uint64_t> : std::integral_constant<gpuwire_dtype, GPUWIRE_UINT64> {};
template <> struct dtype_of<float> : std::integral_constant<gpuwire_dtype, GPUWIRE_FLOAT32> {};
template <> struct dtype_of<double> : std::integral_constant<gpuwire_dtype, GPUWIRE_FLOAT64> {};
template <>
struct dtype_of<std::complex<float>> : std::integral_constant<gpuwire_dtype, GPUWIRE_COMPLEX64> {};
template <>
struct dtype_of<std::complex<double>>
    : std::integral_constant<gpuwire_dtype, GPUWIRE_COMPLEX128> {};

/** The (value, index) pairs that GPUWIRE_MINLOC and GPUWIRE_MAXLOC reduce, with the layouts of
 * GPUWIRE_FLOAT32_INT32, GPUWIRE_FLOAT64_INT32 and GPUWIRE_INT32_INT32 (as MPI_FLOAT_INT,
 * MPI_DOUBLE_INT, MPI_2INT). */
struct float32_int32 {
    float value;
    int32_t index;
};
struct float64_int32 {
    double value;
    int32_t index;
};
struct int32_int32 {
    int32_t value;
    int32_t index;
};
static_assert(sizeof(float32_int32) == 8 && sizeof(float64_int32) == 16 && sizeof(int32_int32) == 8,
              "the pair datatypes' C layouts");
template <>
struct dtype_of<float32_int32> : std::integral_constant<gpuwire_dtype, GPUWIRE_FLOAT32_INT32> {};
template <>
struct dtype_of<float64_int32> : std::integral_constant<gpuwire_dtype, GPUWIRE_FLOAT64_INT32> {};
template <>
struct dtype_of<int32_int32> : std::integral_constant<gpuwire_dtype, GPUWIRE_INT32_INT32> {};

/** The 64-bit integer type that int64_t is not (long long where int64_t is long, as on Linux):
 * the same datatype by its size, so that std::vector<long long> works too. */
using other_int64 = std::conditional_t<std::is_same<int64_t, long>::value, long long, long>;
using other_uint64 =
    std::conditional_t<std::is_same<uint64_t, unsigned long>::value, unsigned long long, unsigned long>;
template <>
struct dtype_of<other_int64>
    : std::integral_constant<gpuwire_dtype, sizeof(other_int64) == 8 ? GPUWIRE_INT64 : GPUWIRE_INT32> {};
template <>
struct dtype_of<other_uint64>
    : std::integral_constant<gpuwire_dtype, sizeof(other_uint64) == 8 ? GPUWIRE_UINT64 : GPUWIRE_UINT32> {};

template <class T> constexpr gpuwire_dtype dtype_v = dtype_of<std::remove_cv_t<T>>::value;

namespace detail {
/** The C name of a datatype, for messages. */
inline std::string dtype_name(gpuwire_dtype dtype)
{
    static const char *const names[] = {
        "GPUWIRE_INT8",    "GPUWIRE_UINT8",   "GPUWIRE_INT32",    "GPUWIRE_UINT32",
        "GPUWIRE_INT64",   "GPUWIRE_UINT64",  "GPUWIRE_FLOAT16",  "GPUWIRE_FLOAT32",
        "GPUWIRE_FLOAT64", "GPUWIRE_BFLOAT16", "GPUWIRE_COMPLEX64", "GPUWIRE_COMPLEX128",
        "GPUWIRE_FLOAT32_INT32", "GPUWIRE_FLOAT64_INT32", "GPUWIRE_INT32_INT32"};
    const int d = static_cast<int>(dtype);
    if (d >= 0 && d < static_cast<int>(sizeof names / sizeof names[0]))
        return names[d];
    return "datatype " + std::to_string(d);
}

template <class T, class = void> struct has_dtype : std::false_type {};
template <class T>
struct has_dtype<T, std::void_t<decltype(dtype_of<std::remove_cv_t<T>>::value)>>
    : std::true_type {};

template <class C, class = void> struct has_element_type : std::false_type {};
template <class C>
struct has_element_type<C, std::void_t<typename C::element_type>> : std::true_type {};
/** Whether a container argument (C as a forwarding reference deduces it) may be used: an lvalue,
 * or a temporary view (std::span, gpuwire::span: types with element_type), whose elements
 * outlive it; a temporary container's elements (a std::vector's) would go with it. */
template <class C>
constexpr bool usable_container_v =
    std::is_lvalue_reference<C>::value || has_element_type<std::remove_cv_t<C>>::value;
} // namespace detail

/** The size of one element of `dtype` in bytes (gpuwire_dtype_size). */
inline int64_t dtype_size(gpuwire_dtype dtype)
{
    int64_t bytes = 0;
    detail::check(gpuwire_dtype_size(dtype, &bytes));
    return bytes;
}

// ---- span --------------------------------------------------------------------------------------

/** A view of `size()` contiguous elements of T (as std::span<T>, which C++17 lacks). */
template <class T> class span {
public:
    using element_type = T;
    using value_type = std::remove_cv_t<T>;
    using size_type = std::size_t;
    using pointer = T *;
    using reference = T &;
    using iterator = T *;

    constexpr span() noexcept = default;
    /** `size` elements from `data`, a pointer (not the literal 0, which a braced list such as
     * {0, 2} would otherwise pass here as the null pointer). */
    template <class P, class = std::enable_if_t<std::is_pointer<P>::value &&
                                                std::is_convertible<P, T *>::value>>
    constexpr span(P data, size_type size) noexcept : data_(data), size_(size)
    {
    }
    /** The values of a braced list, for a span of const elements given as an argument:
     * f({0, 2}) (the list lives until the call's full expression ends; as C++26's std::span).
     * A list is values, never a pointer: {NULL, 0} is two zeros (pass {} for no array), and
     * a span kept in a variable from a braced list dangles once the statement ends. */
    template <class U = T, class = std::enable_if_t<std::is_const<U>::value>>
    constexpr span(std::initializer_list<value_type> list) noexcept
        : data_(std::data(list)), size_(list.size())
    {
    }
    template <std::size_t N> constexpr span(T (&array)[N]) noexcept : data_(array), size_(N) {}
    /** From std::vector, std::array, std::span, another span, ...: anything with data() and
     * size() whose elements convert to T (a span<const T> from const containers). */
    template <class C,
              class = std::enable_if_t<
                  !std::is_array<std::remove_reference_t<C>>::value &&
                  std::is_convertible<decltype(std::data(std::declval<C &>())), T *>::value &&
                  std::is_same<std::remove_cv_t<std::remove_pointer_t<
                                   decltype(std::data(std::declval<C &>()))>>,
                               value_type>::value>>
    constexpr span(C &&c) noexcept : data_(std::data(c)), size_(std::size(c))
    {
    }

    constexpr T *data() const noexcept { return data_; }
    constexpr size_type size() const noexcept { return size_; }
    constexpr size_type size_bytes() const noexcept { return size_ * sizeof(T); }
    constexpr bool empty() const noexcept { return size_ == 0; }
    constexpr T &operator[](size_type i) const noexcept { return data_[i]; }
    constexpr T *begin() const noexcept { return data_; }
    constexpr T *end() const noexcept { return data_ + size_; }
    /** Elements [offset, offset + count) (no bounds check, as std::span). */
    constexpr span subspan(size_type offset, size_type count) const noexcept
    {
        return span(data_ + offset, count);
    }
    constexpr span first(size_type count) const noexcept { return span(data_, count); }
    constexpr span last(size_type count) const noexcept
    {
        return span(data_ + (size_ - count), count);
    }

private:
    T *data_ = nullptr;
    size_type size_ = 0;
};

template <class C> span(C &) -> span<std::remove_pointer_t<decltype(std::data(std::declval<C &>()))>>;
template <class T, std::size_t N> span(T (&)[N]) -> span<T>;

// ---- library -----------------------------------------------------------------------------------

/** gpuwire_init in the constructor, gpuwire_finalize in the destructor (errors ignored there).
 * Declare it before any comm, buffer or request, so that it is destroyed after them. Only the
 * environment that initialized gpuwire finalizes it: one made while gpuwire is initialized (a
 * library routine's, under the program's own) leaves gpuwire running when it is destroyed. */
class environment {
public:
    environment() : owner_(!initialized()) { detail::check(gpuwire_init()); }
    ~environment()
    {
        if (owner_)
            (void)gpuwire_finalize();
    }
    environment(const environment &) = delete;
    environment &operator=(const environment &) = delete;

    /** gpuwire_finalize now, reporting its errors; the destructor then does nothing. */
    void finalize()
    {
        int32_t flag = 0;
        if (gpuwire_initialized(&flag) == GPUWIRE_SUCCESS && flag)
            detail::check(gpuwire_finalize());
    }
    /** gpuwire_initialized. */
    static bool initialized()
    {
        int32_t flag = 0;
        detail::check(gpuwire_initialized(&flag));
        return flag != 0;
    }
    /** gpuwire_query_thread: the MPI thread level in effect. */
    static gpuwire_thread_level thread_level()
    {
        int32_t level = 0;
        detail::check(gpuwire_query_thread(&level));
        return static_cast<gpuwire_thread_level>(level);
    }
    /** gpuwire_owns_mpi: whether gpuwire initialized MPI (and will finalize it). */
    static bool owns_mpi()
    {
        int32_t flag = 0;
        detail::check(gpuwire_owns_mpi(&flag));
        return flag != 0;
    }

private:
    bool owner_; // whether gpuwire was not initialized before this object
};

struct version_info {
    int32_t major, minor, patch;
};

/** The library's version at run time (gpuwire_get_version). */
inline version_info version()
{
    version_info v{0, 0, 0};
    detail::check(gpuwire_get_version(&v.major, &v.minor, &v.patch));
    return v;
}

/** The defaults and GPUWIRE_* environment variables (gpuwire_config_init). */
inline gpuwire_config config_init()
{
    gpuwire_config cfg;
    detail::check(gpuwire_config_init(&cfg));
    return cfg;
}

// ---- buffer ------------------------------------------------------------------------------------

/** Owns a gpuwire_buffer handle (freed by the destructor). */
class buffer {
public:
    buffer() noexcept = default;
    /** Adopts a C handle (freed by this object). */
    explicit buffer(gpuwire_buffer handle) noexcept : h_(handle) {}
    buffer(const buffer &) = delete;
    buffer &operator=(const buffer &) = delete;
    buffer(buffer &&other) noexcept : h_(std::exchange(other.h_, GPUWIRE_BUFFER_NULL)) {}
    buffer &operator=(buffer &&other) noexcept
    {
        if (this != &other) {
            reset();
            h_ = std::exchange(other.h_, GPUWIRE_BUFFER_NULL);
        }
        return *this;
    }
    ~buffer() { reset(); }

    /** `count` zero-filled elements of `dtype` owned by gpuwire (gpuwire_buffer_alloc). */
    static buffer alloc(int64_t count, gpuwire_dtype dtype,
                        gpuwire_space space = GPUWIRE_SPACE_HOST, int32_t device = -1)
    {
        gpuwire_buffer h = GPUWIRE_BUFFER_NULL;
        detail::check(gpuwire_buffer_alloc(count, dtype, space, device, &h));
        return buffer(h);
    }
    template <class T>
    static buffer alloc(int64_t count, gpuwire_space space = GPUWIRE_SPACE_HOST,
                        int32_t device = -1)
    {
        return alloc(count, dtype_v<T>, space, device);
    }
    /** `count` elements of `dtype` at any address, e.g. device memory (gpuwire_buffer_wrap).
     * The memory is borrowed: keep it valid while the buffer, a view or a request uses it. */
    static buffer wrap(void *ptr, int64_t count, gpuwire_dtype dtype,
                       gpuwire_space space = GPUWIRE_SPACE_AUTO)
    {
        gpuwire_buffer h = GPUWIRE_BUFFER_NULL;
        detail::check(gpuwire_buffer_wrap(ptr, count, dtype, space, &h));
        return buffer(h);
    }
    /** Elements (i_0, ..., i_{n-1}), 0 <= i_k < lens[k], at sum i_k strides[k] elements after
     * `ptr`, in that order with i_0 fastest (gpuwire_buffer_wrap_strided: a Fortran section's
     * layout; a C array's lengths and strides reversed). Borrowed, as wrap(). */
    static buffer wrap_strided(void *ptr, const std::vector<int64_t> &lens,
                               const std::vector<int64_t> &strides, gpuwire_dtype dtype,
                               gpuwire_space space = GPUWIRE_SPACE_AUTO)
    {
        if (lens.size() != strides.size())
            throw error(GPUWIRE_ERROR_INVALID_ARGUMENT,
                        "gpuwire::buffer::wrap_strided: lens and strides differ in length");
        gpuwire_buffer h = GPUWIRE_BUFFER_NULL;
        detail::check(gpuwire_buffer_wrap_strided(ptr, static_cast<int32_t>(lens.size()),
                                                  lens.data(), strides.data(), dtype, space, &h));
        return buffer(h);
    }
    /** The elements of a span (borrowed; the datatype is T's). */
    template <class T, class = std::enable_if_t<detail::has_dtype<T>::value>>
    static buffer wrap(span<T> s, gpuwire_space space = GPUWIRE_SPACE_AUTO)
    {
        static_assert(!std::is_const<T>::value,
                      "gpuwire::buffer::wrap needs writable memory (a buffer may be received into)");
        return wrap(static_cast<void *>(s.data()), static_cast<int64_t>(s.size()), dtype_v<T>,
                    space);
    }
    /** The elements of a container with data() and size() (std::vector, std::array, ...; also a
     * temporary std::span). */
    template <class C, class T = std::remove_pointer_t<decltype(std::data(std::declval<C &>()))>,
              class = std::enable_if_t<detail::has_dtype<T>::value &&
                                       detail::usable_container_v<C>>>
    static buffer wrap(C &&container, gpuwire_space space = GPUWIRE_SPACE_AUTO)
    {
        return wrap(span<T>(std::data(container), std::size(container)), space);
    }

    /** Elements [offset, offset + count), sharing the memory (gpuwire_buffer_view). */
    buffer view(int64_t offset, int64_t count) const
    {
        gpuwire_buffer h = GPUWIRE_BUFFER_NULL;
        detail::check(gpuwire_buffer_view(h_, offset, count, &h));
        return buffer(h);
    }

    /** `count` blocks of `blocklen` elements, block i at element offset + i * stride, as
     * MPI_Type_vector (gpuwire_buffer_view_strided); operations pack and unpack it. */
    buffer view_strided(int64_t offset, int64_t count, int64_t blocklen, int64_t stride) const
    {
        gpuwire_buffer h = GPUWIRE_BUFFER_NULL;
        detail::check(gpuwire_buffer_view_strided(h_, offset, count, blocklen, stride, &h));
        return buffer(h);
    }
    /** The `subsizes` block at `starts` of an array of `sizes` from the first element, as
     * MPI_Type_create_subarray (gpuwire_buffer_view_subarray; order GPUWIRE_ORDER_C or
     * GPUWIRE_ORDER_FORTRAN). */
    buffer view_subarray(const std::vector<int64_t> &sizes, const std::vector<int64_t> &subsizes,
                         const std::vector<int64_t> &starts, int32_t order = GPUWIRE_ORDER_C) const
    {
        if (subsizes.size() != sizes.size() || starts.size() != sizes.size())
            throw error(GPUWIRE_ERROR_INVALID_ARGUMENT,
                        "gpuwire::buffer::view_subarray: sizes, subsizes and starts differ in length");
        gpuwire_buffer h = GPUWIRE_BUFFER_NULL;
        detail::check(gpuwire_buffer_view_subarray(h_, static_cast<int32_t>(sizes.size()),
                                                   sizes.data(), subsizes.data(), starts.data(),
                                                   order, &h));
        return buffer(h);
    }

    /** Copies count() elements from host memory into the buffer (gpuwire_buffer_copy_from_host). */
    void copy_from_host(const void *src, void *stream = nullptr) const
    {
        detail::check(gpuwire_buffer_copy_from_host(h_, src, stream));
    }
    /** As copy_from_host(const void *), checking the span's type and length against the buffer. */
    template <class T> void copy_from_host(span<const T> src, void *stream = nullptr) const
    {
        check_shape(dtype_v<T>, src.size(), "gpuwire_buffer_copy_from_host");
        copy_from_host(static_cast<const void *>(src.data()), stream);
    }
    template <class T, class = std::enable_if_t<!std::is_const<T>::value>>
    void copy_from_host(span<T> src, void *stream = nullptr) const
    {
        copy_from_host(span<const T>(src.data(), src.size()), stream);
    }
    /** From a container with data() and size() (std::vector, std::array, ...). */
    template <class C, class T = std::remove_pointer_t<decltype(std::data(std::declval<const C &>()))>,
              class = std::enable_if_t<detail::has_dtype<T>::value>>
    void copy_from_host(const C &src, void *stream = nullptr) const
    {
        copy_from_host(span<T>(std::data(src), std::size(src)), stream);
    }
    /** Copies count() elements into host memory (gpuwire_buffer_copy_to_host). */
    void copy_to_host(void *dst, void *stream = nullptr) const
    {
        detail::check(gpuwire_buffer_copy_to_host(h_, dst, stream));
    }
    template <class T> void copy_to_host(span<T> dst, void *stream = nullptr) const
    {
        check_shape(dtype_v<T>, dst.size(), "gpuwire_buffer_copy_to_host");
        copy_to_host(static_cast<void *>(dst.data()), stream);
    }
    /** Into a container with data() and size() (std::vector, std::array, ...; also a temporary
     * std::span). */
    template <class C, class T = std::remove_pointer_t<decltype(std::data(std::declval<C &>()))>,
              class = std::enable_if_t<detail::has_dtype<T>::value && !std::is_const<T>::value &&
                                       detail::usable_container_v<C>>>
    void copy_to_host(C &&dst, void *stream = nullptr) const
    {
        copy_to_host(span<T>(std::data(dst), std::size(dst)), stream);
    }

    /** The address of the first element (gpuwire_buffer_pointer). */
    void *pointer() const
    {
        void *p = nullptr;
        detail::check(gpuwire_buffer_pointer(h_, &p));
        return p;
    }
    /** The number of elements (gpuwire_buffer_count). */
    int64_t count() const
    {
        int64_t n = 0;
        detail::check(gpuwire_buffer_count(h_, &n));
        return n;
    }
    /** gpuwire_buffer_dtype. */
    gpuwire_dtype dtype() const
    {
        int32_t d = 0;
        detail::check(gpuwire_buffer_dtype(h_, &d));
        return static_cast<gpuwire_dtype>(d);
    }
    /** gpuwire_buffer_space. */
    gpuwire_space space() const
    {
        int32_t s = 0;
        detail::check(gpuwire_buffer_space(h_, &s));
        return static_cast<gpuwire_space>(s);
    }
    /** The CUDA device of the memory, -1 for host memory (gpuwire_buffer_device). */
    int32_t device() const
    {
        int32_t d = -1;
        detail::check(gpuwire_buffer_device(h_, &d));
        return d;
    }
    /** Whether gpuwire allocated the memory (gpuwire_buffer_owned). */
    bool owned() const
    {
        int32_t o = 0;
        detail::check(gpuwire_buffer_owned(h_, &o));
        return o != 0;
    }
    /** Whether the elements are count() consecutive ones (gpuwire_buffer_contiguous): not a
     * strided or subarray view. */
    bool contiguous() const
    {
        int32_t c = 0;
        detail::check(gpuwire_buffer_contiguous(h_, &c));
        return c != 0;
    }
    /** The memory of a host, pinned or managed buffer as a span of T; throws
     * GPUWIRE_ERROR_DTYPE_MISMATCH unless T is the buffer's type, and
     * GPUWIRE_ERROR_INVALID_ARGUMENT for device memory and for a strided or subarray view, whose
     * elements are not count() consecutive ones (copy_to_host gives them). */
    template <class T> span<T> host_span() const
    {
        if (dtype() != dtype_v<T>)
            throw error(GPUWIRE_ERROR_DTYPE_MISMATCH,
                        "gpuwire::buffer::host_span: the buffer's datatype is not the span's");
        if (space() == GPUWIRE_SPACE_DEVICE)
            throw error(GPUWIRE_ERROR_INVALID_ARGUMENT,
                        "gpuwire::buffer::host_span: the buffer is in device memory");
        if (!contiguous())
            throw error(GPUWIRE_ERROR_INVALID_ARGUMENT,
                        "gpuwire::buffer::host_span: the buffer is a strided or subarray view, "
                        "whose elements are not consecutive (copy_to_host gives them)");
        return span<T>(static_cast<T *>(pointer()), static_cast<std::size_t>(count()));
    }

    /** The C handle (still owned by this object). */
    gpuwire_buffer get() const noexcept { return h_; }
    /** Gives up ownership: returns the C handle and leaves this object NULL. */
    gpuwire_buffer release() noexcept { return std::exchange(h_, GPUWIRE_BUFFER_NULL); }
    explicit operator bool() const noexcept { return h_.h != 0; }
    /** Frees the handle now, reporting errors (gpuwire_buffer_free); NULL afterwards. */
    void free()
    {
        if (h_.h != 0)
            detail::check(gpuwire_buffer_free(std::exchange(h_, GPUWIRE_BUFFER_NULL)));
    }
    /** Frees the handle now, ignoring errors (what the destructor does). */
    void reset() noexcept
    {
        if (h_.h != 0)
            (void)gpuwire_buffer_free(std::exchange(h_, GPUWIRE_BUFFER_NULL));
    }

private:
    void check_shape(gpuwire_dtype dtype, std::size_t n, const char *what) const
    {
        if (this->dtype() != dtype)
            throw error(GPUWIRE_ERROR_DTYPE_MISMATCH,
                        std::string(what) + ": the span's datatype is not the buffer's");
        if (static_cast<int64_t>(n) != count())
            throw error(GPUWIRE_ERROR_COUNT_MISMATCH,
                        std::string(what) + ": the span has " + std::to_string(n) +
                            " elements, the buffer " + std::to_string(count()));
    }

    gpuwire_buffer h_ = GPUWIRE_BUFFER_NULL;
};

// ---- request -----------------------------------------------------------------------------------

/** Owns a gpuwire_request. The destructor (and move assignment over a pending request) never
 * blocks, also while an exception unwinds the stack: it cancels the request (gpuwire_cancel: a
 * receive whose message has not matched is withdrawn and writes nothing) and frees it
 * (gpuwire_request_free), ignoring their errors. What was not cancelled goes on, as after
 * MPI_Request_free (an isend, a nonblocking collective, a receive already matched or on a path
 * that cannot withdraw it: see gpuwire_cancel in gpuwire.h): keep its memory valid until it
 * completes. */
class request {
public:
    request() noexcept = default;
    explicit request(gpuwire_request handle) noexcept : h_(handle) {}
    request(const request &) = delete;
    request &operator=(const request &) = delete;
    request(request &&other) noexcept : h_(std::exchange(other.h_, GPUWIRE_REQUEST_NULL)) {}
    request &operator=(request &&other) noexcept
    {
        if (this != &other) {
            finish_quietly();
            h_ = std::exchange(other.h_, GPUWIRE_REQUEST_NULL);
        }
        return *this;
    }
    ~request() { finish_quietly(); }

    /** Blocks until the operation completes (gpuwire_wait); the request is then NULL. */
    void wait() { detail::check(gpuwire_wait(&h_)); }
    /** gpuwire_wait_status: waits and returns what its receive matched (source, tag, count). */
    gpuwire_status_t wait_status()
    {
        gpuwire_status_t st{};
        detail::check(gpuwire_wait_status(&h_, &st));
        return st;
    }
    /** gpuwire_test_status: whether it completed; `status` is written when it did. */
    bool test_status(gpuwire_status_t &status)
    {
        int32_t flag = 0;
        detail::check(gpuwire_test_status(&h_, &flag, &status));
        return flag != 0;
    }
    /** Whether the operation has completed (gpuwire_test; never blocks). */
    bool test()
    {
        int32_t flag = 0;
        detail::check(gpuwire_test(&h_, &flag));
        return flag != 0;
    }
    /** gpuwire_request_free now, reporting its errors (GPUWIRE_ERROR_COMM_BROKEN when the
     * request was abandoned on a broken communicator); NULL afterwards. An operation in flight
     * goes on, as after MPI_Request_free. */
    void free()
    {
        if (h_.h != 0)
            detail::check(gpuwire_request_free(&h_));
    }
    /** gpuwire_cancel: a receive whose message has not matched is withdrawn, and the request
     * then completes at once, its status cancelled; anything else completes as it would have.
     * Complete (wait(), test()) or free() the request afterwards, as in MPI. */
    void cancel()
    {
        if (h_.h != 0)
            detail::check(gpuwire_cancel(&h_));
    }
    /** Whether an operation is still attached (false once completed). */
    bool active() const noexcept { return h_.h != 0; }
    gpuwire_request get() const noexcept { return h_; }
    gpuwire_request release() noexcept { return std::exchange(h_, GPUWIRE_REQUEST_NULL); }

private:
    void finish_quietly() noexcept
    {
        if (h_.h != 0) {
            (void)gpuwire_cancel(&h_);
            (void)gpuwire_request_free(&h_);
        }
        h_ = GPUWIRE_REQUEST_NULL;
    }

    gpuwire_request h_ = GPUWIRE_REQUEST_NULL;
};

/** Waits for every request (gpuwire_waitall): all are NULL afterwards, even when one failed;
 * throws the first failure. */
inline void wait_all(span<request> requests)
{
    std::vector<gpuwire_request> handles;
    handles.reserve(requests.size());
    for (request &r : requests)
        handles.push_back(r.release());
    gpuwire_status st = gpuwire_waitall(static_cast<int32_t>(handles.size()), handles.data());
    for (std::size_t i = 0; i < handles.size(); i++)
        requests[i] = request(handles[i]); // NULL after gpuwire_waitall
    detail::check(st);
}

/** gpuwire_waitany: waits until one request completes; its index (GPUWIRE_UNDEFINED when every
 * request is NULL), with its status in `status` when given. That request is NULL afterwards.
 * A request that failed is the one that completed: its error is thrown, error::index() names it,
 * and it is NULL afterwards. */
inline int32_t wait_any(span<request> requests, gpuwire_status_t *status = nullptr)
{
    std::vector<gpuwire_request> handles;
    handles.reserve(requests.size());
    for (request &r : requests)
        handles.push_back(r.release());
    int32_t index = GPUWIRE_UNDEFINED;
    gpuwire_status st = gpuwire_waitany(static_cast<int32_t>(handles.size()), handles.data(), &index, status);
    for (std::size_t i = 0; i < handles.size(); i++)
        requests[i] = request(handles[i]);
    if (st != GPUWIRE_SUCCESS)
        throw error(st, last_error(), index);
    return index;
}

/** gpuwire_testany: whether one request completed (or all are NULL), its index in `index`
 * (GPUWIRE_UNDEFINED when none), its status in `status` when given. As wait_any, a
 * request that failed is thrown with error::index() naming it. */
inline bool test_any(span<request> requests, int32_t &index, gpuwire_status_t *status = nullptr)
{
    std::vector<gpuwire_request> handles;
    handles.reserve(requests.size());
    for (request &r : requests)
        handles.push_back(r.release());
    int32_t flag = 0;
    index = GPUWIRE_UNDEFINED;
    gpuwire_status st = gpuwire_testany(static_cast<int32_t>(handles.size()), handles.data(), &index, &flag, status);
    for (std::size_t i = 0; i < handles.size(); i++)
        requests[i] = request(handles[i]);
    if (st != GPUWIRE_SUCCESS)
        throw error(st, last_error(), index);
    return flag != 0;
}

/** gpuwire_testall: whether every request completed (all NULL then); `statuses`, when given,
 * needs one entry per request. */
inline bool test_all(span<request> requests, gpuwire_status_t *statuses = nullptr)
{
    std::vector<gpuwire_request> handles;
    handles.reserve(requests.size());
    for (request &r : requests)
        handles.push_back(r.release());
    int32_t flag = 0;
    gpuwire_status st = gpuwire_testall(static_cast<int32_t>(handles.size()), handles.data(), &flag, statuses);
    for (std::size_t i = 0; i < handles.size(); i++)
        requests[i] = request(handles[i]);
    detail::check(st);
    return flag != 0;
}

namespace detail {
/** gpuwire_waitsome or gpuwire_testsome (`fn`) over `requests`: the indices of those that
 * completed, their statuses in `statuses` when given. */
template <class Fn>
inline std::vector<int32_t> some(Fn fn, span<request> requests, std::vector<gpuwire_status_t> *statuses)
{
    std::vector<gpuwire_request> handles;
    handles.reserve(requests.size());
    for (request &r : requests)
        handles.push_back(r.release());
    std::vector<int32_t> indices(handles.size());
    std::vector<gpuwire_status_t> st(handles.size());
    int32_t out = 0;
    gpuwire_status rc = fn(static_cast<int32_t>(handles.size()), handles.data(), &out, indices.data(),
                           statuses ? st.data() : nullptr);
    for (std::size_t i = 0; i < handles.size(); i++)
        requests[i] = request(handles[i]);
    const std::size_t n = out > 0 ? static_cast<std::size_t>(out) : 0;
    indices.resize(n);
    if (statuses) {
        st.resize(n);
        *statuses = st;
    }
    if (rc != GPUWIRE_SUCCESS) {
        int32_t at = GPUWIRE_UNDEFINED;
        for (std::size_t k = 0; k < n && statuses; k++)
            if ((*statuses)[k].error != GPUWIRE_SUCCESS) {
                at = indices[k];
                break;
            }
        throw error(rc, last_error(), at);
    }
    return indices;
}
} // namespace detail

/** gpuwire_waitsome: waits until at least one request completes; the indices of every request
 * that has completed by then (each NULL afterwards), in array order; empty when every request
 * is NULL. Their statuses in `statuses` when given (one per index). A request that failed is
 * among them: its error is thrown (error::index() naming it where `statuses` is given). */
inline std::vector<int32_t> wait_some(span<request> requests, std::vector<gpuwire_status_t> *statuses = nullptr)
{
    return detail::some(gpuwire_waitsome, requests, statuses);
}

/** gpuwire_testsome: as wait_some without blocking (empty when none has completed). */
inline std::vector<int32_t> test_some(span<request> requests, std::vector<gpuwire_status_t> *statuses = nullptr)
{
    return detail::some(gpuwire_testsome, requests, statuses);
}

// ---- comm --------------------------------------------------------------------------------------

/** Owns a gpuwire_comm (freed by the destructor). Operations are methods; each names its C
 * function. Counts come from the buffers; `stream` is a CUstream or nullptr.
 *
 * gpuwire_comm_free is collective, so the destructor frees only on the ordinary path (every rank
 * leaves the scope the same way). A destructor that runs while an exception unwinds the stack
 * (std::uncaught_exceptions() greater than when this object was made) does not call it: the
 * other ranks may never reach their free. The communicator is then left to gpuwire_finalize
 * (its handle stays valid until then; free() it on every rank to release it earlier). */
class comm {
public:
    comm() noexcept = default;
    explicit comm(gpuwire_comm handle) noexcept : h_(handle) {}
    comm(const comm &) = delete;
    comm &operator=(const comm &) = delete;
    comm(comm &&other) noexcept : h_(std::exchange(other.h_, GPUWIRE_COMM_NULL)) {}
    comm &operator=(comm &&other) noexcept
    {
        if (this != &other) {
            reset();
            h_ = std::exchange(other.h_, GPUWIRE_COMM_NULL);
        }
        return *this;
    }
    ~comm()
    {
        if (std::uncaught_exceptions() > uncaught_)
            h_ = GPUWIRE_COMM_NULL; // unwinding: left to gpuwire_finalize (see above)
        reset();
    }

    /** Over MPI_COMM_WORLD (gpuwire_comm_world); cfg nullptr = defaults and environment. */
    static comm world(const gpuwire_config *cfg = nullptr)
    {
        gpuwire_comm h = GPUWIRE_COMM_NULL;
        detail::check(gpuwire_comm_world(cfg, &h));
        return comm(h);
    }
    static comm world(const gpuwire_config &cfg) { return world(&cfg); }
    /** Over an MPI communicator given by its Fortran handle, MPI_Comm_c2f(c)
     * (gpuwire_comm_create). */
    static comm from_mpi(int32_t mpi_fint, const gpuwire_config *cfg = nullptr)
    {
        gpuwire_comm h = GPUWIRE_COMM_NULL;
        detail::check(gpuwire_comm_create(mpi_fint, cfg, &h));
        return comm(h);
    }
    static comm from_mpi(int32_t mpi_fint, const gpuwire_config &cfg)
    {
        return from_mpi(mpi_fint, &cfg);
    }
    /** gpuwire_comm_split: a NULL comm (false) for GPUWIRE_UNDEFINED. */
    comm split(int32_t color, int32_t key) const
    {
        gpuwire_comm h = GPUWIRE_COMM_NULL;
        detail::check(gpuwire_comm_split(h_, color, key, &h));
        return comm(h);
    }
    /** gpuwire_comm_dup. */
    comm dup() const
    {
        gpuwire_comm h = GPUWIRE_COMM_NULL;
        detail::check(gpuwire_comm_dup(h_, &h));
        return comm(h);
    }

    int32_t rank() const { return query(gpuwire_comm_rank); }
    int32_t size() const { return query(gpuwire_comm_size); }
    int32_t local_rank() const { return query(gpuwire_comm_local_rank); }
    int32_t local_size() const { return query(gpuwire_comm_local_size); }
    gpuwire_backend backend() const
    {
        return static_cast<gpuwire_backend>(query(gpuwire_comm_backend));
    }
    int32_t device() const { return query(gpuwire_comm_device); }
    /** The Fortran handle of gpuwire's own MPI duplicate (MPI_Comm_f2c it; do not free it). */
    int32_t mpi() const { return query(gpuwire_comm_mpi); }
    /** gpuwire_comm_describe. */
    std::string describe() const
    {
        char buf[4096];
        detail::check(gpuwire_comm_describe(h_, buf, sizeof buf));
        return std::string(buf);
    }

    // point-to-point
    void send(const buffer &buf, int32_t dest, int32_t tag, void *stream = nullptr) const
    {
        detail::check(gpuwire_send(h_, buf.get(), dest, tag, stream));
    }
    void recv(const buffer &buf, int32_t source, int32_t tag, void *stream = nullptr) const
    {
        detail::check(gpuwire_recv(h_, buf.get(), source, tag, stream));
    }
    /** gpuwire_isend: keep `buf`'s memory valid until the request completes. */
    request isend(const buffer &buf, int32_t dest, int32_t tag, void *stream = nullptr) const
    {
        gpuwire_request r = GPUWIRE_REQUEST_NULL;
        detail::check(gpuwire_isend(h_, buf.get(), dest, tag, stream, &r));
        return request(r);
    }
    request irecv(const buffer &buf, int32_t source, int32_t tag, void *stream = nullptr) const
    {
        gpuwire_request r = GPUWIRE_REQUEST_NULL;
        detail::check(gpuwire_irecv(h_, buf.get(), source, tag, stream, &r));
        return request(r);
    }
    /** gpuwire_recv_status: up to `buf`'s count from `source` (or GPUWIRE_ANY_SOURCE) with
     * `tag` (or GPUWIRE_ANY_TAG); what it matched. */
    gpuwire_status_t recv_status(const buffer &buf, int32_t source, int32_t tag, void *stream = nullptr) const
    {
        gpuwire_status_t st{};
        detail::check(gpuwire_recv_status(h_, buf.get(), source, tag, stream, &st));
        return st;
    }
    /** gpuwire_irecv_status: its status comes with request::wait_status and the like. */
    request irecv_status(const buffer &buf, int32_t source, int32_t tag, void *stream = nullptr) const
    {
        gpuwire_request r = GPUWIRE_REQUEST_NULL;
        detail::check(gpuwire_irecv_status(h_, buf.get(), source, tag, stream, &r));
        return request(r);
    }
    /** gpuwire_probe: the next matching message's status, its count in `dtype` elements. */
    gpuwire_status_t probe(int32_t source, int32_t tag, gpuwire_dtype dtype) const
    {
        gpuwire_status_t st{};
        detail::check(gpuwire_probe(h_, source, tag, dtype, &st));
        return st;
    }
    /** gpuwire_iprobe: whether a matching message is there (its status in `status`). */
    bool iprobe(int32_t source, int32_t tag, gpuwire_dtype dtype, gpuwire_status_t &status) const
    {
        int32_t flag = 0;
        detail::check(gpuwire_iprobe(h_, source, tag, dtype, &flag, &status));
        return flag != 0;
    }
    /** gpuwire_comm_abort: every later operation fails with GPUWIRE_ERROR_COMM_BROKEN, and so
     * do pending waits gpuwire runs in a loop; without a timeout a call blocked inside MPI
     * (recv, probe, a large send, a collective) is not woken (see the C function). */
    void abort() const { detail::check(gpuwire_comm_abort(h_)); }
    void sendrecv(const buffer &sendbuf, int32_t dest, int32_t sendtag, const buffer &recvbuf,
                  int32_t source, int32_t recvtag, void *stream = nullptr) const
    {
        detail::check(gpuwire_sendrecv(h_, sendbuf.get(), dest, sendtag, recvbuf.get(), source,
                                       recvtag, stream));
    }

    // collectives (a default-constructed buffer is GPUWIRE_BUFFER_NULL where that is allowed)
    void barrier(void *stream = nullptr) const { detail::check(gpuwire_barrier(h_, stream)); }
    void bcast(const buffer &buf, int32_t root, void *stream = nullptr) const
    {
        detail::check(gpuwire_bcast(h_, buf.get(), root, stream));
    }
    /** Broadcasts a span's elements (wrapped for the call). */
    template <class T> void bcast(span<T> data, int32_t root) const
    {
        bcast(buffer::wrap(data), root);
    }
    /** Broadcasts a container's elements (std::vector, std::array, ...; also a temporary
     * std::span; wrapped for the call). */
    template <class C, class T = std::remove_pointer_t<decltype(std::data(std::declval<C &>()))>,
              class = std::enable_if_t<detail::has_dtype<T>::value &&
                                       detail::usable_container_v<C>>>
    void bcast(C &&data, int32_t root) const
    {
        bcast(span<T>(std::data(data), std::size(data)), root);
    }
    void reduce(const buffer &sendbuf, const buffer &recvbuf, gpuwire_op op, int32_t root,
                void *stream = nullptr) const
    {
        detail::check(gpuwire_reduce(h_, sendbuf.get(), recvbuf.get(), op, root, stream));
    }
    void allreduce(const buffer &sendbuf, const buffer &recvbuf, gpuwire_op op,
                   void *stream = nullptr) const
    {
        detail::check(gpuwire_allreduce(h_, sendbuf.get(), recvbuf.get(), op, stream));
    }
    /** In place. */
    void allreduce(const buffer &buf, gpuwire_op op, void *stream = nullptr) const
    {
        allreduce(buf, buf, op, stream);
    }
    /** In place on a span's elements (wrapped for the call). */
    template <class T> void allreduce(span<T> data, gpuwire_op op) const
    {
        buffer b = buffer::wrap(data);
        allreduce(b, b, op);
    }
    /** In place on a container's elements (std::vector, std::array, ...; also a temporary
     * std::span; wrapped for the call). */
    template <class C, class T = std::remove_pointer_t<decltype(std::data(std::declval<C &>()))>,
              class = std::enable_if_t<detail::has_dtype<T>::value &&
                                       detail::usable_container_v<C>>>
    void allreduce(C &&data, gpuwire_op op) const
    {
        allreduce(span<T>(std::data(data), std::size(data)), op);
    }
    void allgather(const buffer &sendbuf, const buffer &recvbuf, void *stream = nullptr) const
    {
        detail::check(gpuwire_allgather(h_, sendbuf.get(), recvbuf.get(), stream));
    }
    /** gpuwire_allgatherv with gpuwire exchanging the counts. */
    void allgatherv(const buffer &sendbuf, const buffer &recvbuf, void *stream = nullptr) const
    {
        detail::check(gpuwire_allgatherv(h_, sendbuf.get(), recvbuf.get(), nullptr, stream));
    }
    /** gpuwire_allgatherv with one count per rank. Another number of counts is
     * GPUWIRE_ERROR_INVALID_ARGUMENT, reported through the C call so that, in checking mode, the
     * other ranks fail too instead of waiting. */
    void allgatherv(const buffer &sendbuf, const buffer &recvbuf, span<const int64_t> recvcounts,
                    void *stream = nullptr) const
    {
        if (recvcounts.size() != static_cast<std::size_t>(size())) {
            (void)gpuwire_allgatherv(h_, GPUWIRE_BUFFER_NULL, recvbuf.get(), nullptr, stream);
            throw error(GPUWIRE_ERROR_INVALID_ARGUMENT,
                        "gpuwire_allgatherv: " + std::to_string(recvcounts.size()) +
                            " recvcounts for " + std::to_string(size()) + " ranks");
        }
        detail::check(
            gpuwire_allgatherv(h_, sendbuf.get(), recvbuf.get(), recvcounts.data(), stream));
    }
    /** Deprecated name of reduce_scatter_block (MPI_Reduce_scatter_block). */
    void reduce_scatter(const buffer &sendbuf, const buffer &recvbuf, gpuwire_op op,
                        void *stream = nullptr) const
    {
        detail::check(gpuwire_reduce_scatter(h_, sendbuf.get(), recvbuf.get(), op, stream));
    }
    /** gpuwire_scan (as MPI_Scan); in place when both are the same buffer. */
    void scan(const buffer &sendbuf, const buffer &recvbuf, gpuwire_op op,
              void *stream = nullptr) const
    {
        detail::check(gpuwire_scan(h_, sendbuf.get(), recvbuf.get(), op, stream));
    }
    /** gpuwire_exscan (as MPI_Exscan): rank 0's recvbuf is left untouched. */
    void exscan(const buffer &sendbuf, const buffer &recvbuf, gpuwire_op op,
                void *stream = nullptr) const
    {
        detail::check(gpuwire_exscan(h_, sendbuf.get(), recvbuf.get(), op, stream));
    }
    void reduce_scatter_block(const buffer &sendbuf, const buffer &recvbuf, gpuwire_op op,
                              void *stream = nullptr) const
    {
        detail::check(gpuwire_reduce_scatter_block(h_, sendbuf.get(), recvbuf.get(), op, stream));
    }
    /* The v-collectives (as MPI_Alltoallv, MPI_Gatherv, MPI_Scatterv, MPI_Reduce_scatter):
     * counts and displacements in elements, one per rank; an empty span is NULL (displacements:
     * blocks contiguous in rank order; counts: not significant on this rank). A non-empty span
     * of another length is GPUWIRE_ERROR_INVALID_ARGUMENT, reported through the C call (with a
     * NULL buffer, so no array is read) so that, in checking mode, the other ranks fail too. */
    void alltoallv(const buffer &sendbuf, span<const int64_t> sendcounts,
                   span<const int64_t> sdispls, const buffer &recvbuf,
                   span<const int64_t> recvcounts, span<const int64_t> rdispls,
                   void *stream = nullptr) const
    {
        if (!per_rank({sendcounts, sdispls, recvcounts, rdispls})) {
            (void)gpuwire_alltoallv(h_, GPUWIRE_BUFFER_NULL, nullptr, nullptr, recvbuf.get(),
                                    nullptr, nullptr, stream);
            throw wrong_length("gpuwire_alltoallv");
        }
        detail::check(gpuwire_alltoallv(h_, sendbuf.get(), or_null(sendcounts), or_null(sdispls),
                                        recvbuf.get(), or_null(recvcounts), or_null(rdispls),
                                        stream));
    }
    void gatherv(const buffer &sendbuf, const buffer &recvbuf, span<const int64_t> recvcounts,
                 span<const int64_t> displs, int32_t root, void *stream = nullptr) const
    {
        if (!per_rank({recvcounts, displs})) {
            (void)gpuwire_gatherv(h_, GPUWIRE_BUFFER_NULL, recvbuf.get(), nullptr, nullptr, root,
                                  stream);
            throw wrong_length("gpuwire_gatherv");
        }
        detail::check(gpuwire_gatherv(h_, sendbuf.get(), recvbuf.get(), or_null(recvcounts),
                                      or_null(displs), root, stream));
    }
    void scatterv(const buffer &sendbuf, span<const int64_t> sendcounts,
                  span<const int64_t> displs, const buffer &recvbuf, int32_t root,
                  void *stream = nullptr) const
    {
        if (!per_rank({sendcounts, displs})) {
            (void)gpuwire_scatterv(h_, sendbuf.get(), nullptr, nullptr, GPUWIRE_BUFFER_NULL, root,
                                   stream);
            throw wrong_length("gpuwire_scatterv");
        }
        detail::check(gpuwire_scatterv(h_, sendbuf.get(), or_null(sendcounts), or_null(displs),
                                       recvbuf.get(), root, stream));
    }
    void reduce_scatterv(const buffer &sendbuf, const buffer &recvbuf,
                         span<const int64_t> recvcounts, gpuwire_op op,
                         void *stream = nullptr) const
    {
        if (!per_rank({recvcounts})) {
            (void)gpuwire_reduce_scatterv(h_, GPUWIRE_BUFFER_NULL, recvbuf.get(), nullptr, op,
                                          stream);
            throw wrong_length("gpuwire_reduce_scatterv");
        }
        detail::check(gpuwire_reduce_scatterv(h_, sendbuf.get(), recvbuf.get(),
                                              or_null(recvcounts), op, stream));
    }
    void alltoall(const buffer &sendbuf, const buffer &recvbuf, void *stream = nullptr) const
    {
        detail::check(gpuwire_alltoall(h_, sendbuf.get(), recvbuf.get(), stream));
    }
    void gather(const buffer &sendbuf, const buffer &recvbuf, int32_t root,
                void *stream = nullptr) const
    {
        detail::check(gpuwire_gather(h_, sendbuf.get(), recvbuf.get(), root, stream));
    }
    void scatter(const buffer &sendbuf, const buffer &recvbuf, int32_t root,
                 void *stream = nullptr) const
    {
        detail::check(gpuwire_scatter(h_, sendbuf.get(), recvbuf.get(), root, stream));
    }

    // nonblocking collectives: arguments as the blocking forms; each returns a request that
    // wait(), test() or wait_all() completes, in any order. Keep the buffers' memory valid and
    // untouched until then (the request keeps the handles' objects alive). An argument error
    // throws and starts nothing.
    request ibarrier(void *stream = nullptr) const
    {
        gpuwire_request r = GPUWIRE_REQUEST_NULL;
        detail::check(gpuwire_ibarrier(h_, stream, &r));
        return request(r);
    }
    request ibcast(const buffer &buf, int32_t root, void *stream = nullptr) const
    {
        gpuwire_request r = GPUWIRE_REQUEST_NULL;
        detail::check(gpuwire_ibcast(h_, buf.get(), root, stream, &r));
        return request(r);
    }
    request ireduce(const buffer &sendbuf, const buffer &recvbuf, gpuwire_op op, int32_t root,
                    void *stream = nullptr) const
    {
        gpuwire_request r = GPUWIRE_REQUEST_NULL;
        detail::check(gpuwire_ireduce(h_, sendbuf.get(), recvbuf.get(), op, root, stream, &r));
        return request(r);
    }
    request iallreduce(const buffer &sendbuf, const buffer &recvbuf, gpuwire_op op,
                       void *stream = nullptr) const
    {
        gpuwire_request r = GPUWIRE_REQUEST_NULL;
        detail::check(gpuwire_iallreduce(h_, sendbuf.get(), recvbuf.get(), op, stream, &r));
        return request(r);
    }
    /** In place. */
    request iallreduce(const buffer &buf, gpuwire_op op, void *stream = nullptr) const
    {
        return iallreduce(buf, buf, op, stream);
    }
    request iallgather(const buffer &sendbuf, const buffer &recvbuf, void *stream = nullptr) const
    {
        gpuwire_request r = GPUWIRE_REQUEST_NULL;
        detail::check(gpuwire_iallgather(h_, sendbuf.get(), recvbuf.get(), stream, &r));
        return request(r);
    }
    /** gpuwire_iallgatherv with gpuwire exchanging the counts. */
    request iallgatherv(const buffer &sendbuf, const buffer &recvbuf, void *stream = nullptr) const
    {
        gpuwire_request r = GPUWIRE_REQUEST_NULL;
        detail::check(gpuwire_iallgatherv(h_, sendbuf.get(), recvbuf.get(), nullptr, stream, &r));
        return request(r);
    }
    /** gpuwire_iallgatherv with one count per rank (copied at the call). Another number of
     * counts is GPUWIRE_ERROR_INVALID_ARGUMENT, as for allgatherv. */
    request iallgatherv(const buffer &sendbuf, const buffer &recvbuf,
                        span<const int64_t> recvcounts, void *stream = nullptr) const
    {
        gpuwire_request r = GPUWIRE_REQUEST_NULL;
        if (recvcounts.size() != static_cast<std::size_t>(size())) {
            (void)gpuwire_iallgatherv(h_, GPUWIRE_BUFFER_NULL, recvbuf.get(), nullptr, stream, &r);
            throw error(GPUWIRE_ERROR_INVALID_ARGUMENT,
                        "gpuwire_iallgatherv: " + std::to_string(recvcounts.size()) +
                            " recvcounts for " + std::to_string(size()) + " ranks");
        }
        detail::check(gpuwire_iallgatherv(h_, sendbuf.get(), recvbuf.get(), recvcounts.data(),
                                          stream, &r));
        return request(r);
    }
    request iscan(const buffer &sendbuf, const buffer &recvbuf, gpuwire_op op,
                  void *stream = nullptr) const
    {
        gpuwire_request r = GPUWIRE_REQUEST_NULL;
        detail::check(gpuwire_iscan(h_, sendbuf.get(), recvbuf.get(), op, stream, &r));
        return request(r);
    }
    request iexscan(const buffer &sendbuf, const buffer &recvbuf, gpuwire_op op,
                    void *stream = nullptr) const
    {
        gpuwire_request r = GPUWIRE_REQUEST_NULL;
        detail::check(gpuwire_iexscan(h_, sendbuf.get(), recvbuf.get(), op, stream, &r));
        return request(r);
    }
    /** Deprecated name of ireduce_scatter_block. */
    request ireduce_scatter(const buffer &sendbuf, const buffer &recvbuf, gpuwire_op op,
                            void *stream = nullptr) const
    {
        gpuwire_request r = GPUWIRE_REQUEST_NULL;
        detail::check(gpuwire_ireduce_scatter(h_, sendbuf.get(), recvbuf.get(), op, stream, &r));
        return request(r);
    }
    request ireduce_scatter_block(const buffer &sendbuf, const buffer &recvbuf, gpuwire_op op,
                                  void *stream = nullptr) const
    {
        gpuwire_request r = GPUWIRE_REQUEST_NULL;
        detail::check(
            gpuwire_ireduce_scatter_block(h_, sendbuf.get(), recvbuf.get(), op, stream, &r));
        return request(r);
    }
    /** The nonblocking v-collectives: arguments as the blocking forms (the arrays are copied at
     * the call). */
    request ialltoallv(const buffer &sendbuf, span<const int64_t> sendcounts,
                       span<const int64_t> sdispls, const buffer &recvbuf,
                       span<const int64_t> recvcounts, span<const int64_t> rdispls,
                       void *stream = nullptr) const
    {
        gpuwire_request r = GPUWIRE_REQUEST_NULL;
        if (!per_rank({sendcounts, sdispls, recvcounts, rdispls})) {
            (void)gpuwire_ialltoallv(h_, GPUWIRE_BUFFER_NULL, nullptr, nullptr, recvbuf.get(),
                                     nullptr, nullptr, stream, &r);
            throw wrong_length("gpuwire_ialltoallv");
        }
        detail::check(gpuwire_ialltoallv(h_, sendbuf.get(), or_null(sendcounts), or_null(sdispls),
                                         recvbuf.get(), or_null(recvcounts), or_null(rdispls),
                                         stream, &r));
        return request(r);
    }
    request igatherv(const buffer &sendbuf, const buffer &recvbuf, span<const int64_t> recvcounts,
                     span<const int64_t> displs, int32_t root, void *stream = nullptr) const
    {
        gpuwire_request r = GPUWIRE_REQUEST_NULL;
        if (!per_rank({recvcounts, displs})) {
            (void)gpuwire_igatherv(h_, GPUWIRE_BUFFER_NULL, recvbuf.get(), nullptr, nullptr, root,
                                   stream, &r);
            throw wrong_length("gpuwire_igatherv");
        }
        detail::check(gpuwire_igatherv(h_, sendbuf.get(), recvbuf.get(), or_null(recvcounts),
                                       or_null(displs), root, stream, &r));
        return request(r);
    }
    request iscatterv(const buffer &sendbuf, span<const int64_t> sendcounts,
                      span<const int64_t> displs, const buffer &recvbuf, int32_t root,
                      void *stream = nullptr) const
    {
        gpuwire_request r = GPUWIRE_REQUEST_NULL;
        if (!per_rank({sendcounts, displs})) {
            (void)gpuwire_iscatterv(h_, sendbuf.get(), nullptr, nullptr, GPUWIRE_BUFFER_NULL, root,
                                    stream, &r);
            throw wrong_length("gpuwire_iscatterv");
        }
        detail::check(gpuwire_iscatterv(h_, sendbuf.get(), or_null(sendcounts), or_null(displs),
                                        recvbuf.get(), root, stream, &r));
        return request(r);
    }
    request ireduce_scatterv(const buffer &sendbuf, const buffer &recvbuf,
                             span<const int64_t> recvcounts, gpuwire_op op,
                             void *stream = nullptr) const
    {
        gpuwire_request r = GPUWIRE_REQUEST_NULL;
        if (!per_rank({recvcounts})) {
            (void)gpuwire_ireduce_scatterv(h_, GPUWIRE_BUFFER_NULL, recvbuf.get(), nullptr, op,
                                           stream, &r);
            throw wrong_length("gpuwire_ireduce_scatterv");
        }
        detail::check(gpuwire_ireduce_scatterv(h_, sendbuf.get(), recvbuf.get(),
                                               or_null(recvcounts), op, stream, &r));
        return request(r);
    }
    request ialltoall(const buffer &sendbuf, const buffer &recvbuf, void *stream = nullptr) const
    {
        gpuwire_request r = GPUWIRE_REQUEST_NULL;
        detail::check(gpuwire_ialltoall(h_, sendbuf.get(), recvbuf.get(), stream, &r));
        return request(r);
    }
    request igather(const buffer &sendbuf, const buffer &recvbuf, int32_t root,
                    void *stream = nullptr) const
    {
        gpuwire_request r = GPUWIRE_REQUEST_NULL;
        detail::check(gpuwire_igather(h_, sendbuf.get(), recvbuf.get(), root, stream, &r));
        return request(r);
    }
    request iscatter(const buffer &sendbuf, const buffer &recvbuf, int32_t root,
                     void *stream = nullptr) const
    {
        gpuwire_request r = GPUWIRE_REQUEST_NULL;
        detail::check(gpuwire_iscatter(h_, sendbuf.get(), recvbuf.get(), root, stream, &r));
        return request(r);
    }

    /** Throws the error of an operation that failed after its call had returned
     * (gpuwire_comm_async_error; reported once, as ncclCommGetAsyncError). */
    void check_async_error() const { detail::check(gpuwire_comm_async_error(h_)); }
    /** gpuwire_comm_get_async_error: the asynchronous error's code, GPUWIRE_ERROR_COMM_BROKEN
     * for a broken communicator, else GPUWIRE_SUCCESS (does not throw for them). */
    gpuwire_status async_error() const
    {
        gpuwire_status e = GPUWIRE_SUCCESS;
        detail::check(gpuwire_comm_get_async_error(h_, &e));
        return e;
    }

    gpuwire_comm get() const noexcept { return h_; }
    gpuwire_comm release() noexcept { return std::exchange(h_, GPUWIRE_COMM_NULL); }
    explicit operator bool() const noexcept { return h_.h != 0; }
    /** Frees the communicator now, reporting errors (gpuwire_comm_free); NULL afterwards. */
    void free()
    {
        if (h_.h != 0)
            detail::check(gpuwire_comm_free(std::exchange(h_, GPUWIRE_COMM_NULL)));
    }
    /** Frees it now, ignoring errors (what the destructor does). */
    void reset() noexcept
    {
        if (h_.h != 0)
            (void)gpuwire_comm_free(std::exchange(h_, GPUWIRE_COMM_NULL));
    }

private:
    /* Whether each non-empty span has one entry per rank (an invalid handle: true, the C call
     * reports it). */
    bool per_rank(std::initializer_list<span<const int64_t>> arrays) const
    {
        int32_t n = 0;
        if (gpuwire_comm_size(h_, &n) != GPUWIRE_SUCCESS)
            return true;
        for (span<const int64_t> a : arrays)
            if (!a.empty() && a.size() != static_cast<std::size_t>(n))
                return false;
        return true;
    }
    static const int64_t *or_null(span<const int64_t> a) { return a.empty() ? nullptr : a.data(); }
    static error wrong_length(const char *fn)
    {
        return error(GPUWIRE_ERROR_INVALID_ARGUMENT,
                     std::string(fn) + ": the counts and displacements need one entry per rank");
    }
    int32_t query(gpuwire_status (*f)(gpuwire_comm, int32_t *)) const
    {
        int32_t v = 0;
        detail::check(f(h_, &v));
        return v;
    }

    gpuwire_comm h_ = GPUWIRE_COMM_NULL;
    int uncaught_ = std::uncaught_exceptions(); // at construction, for the destructor
};

// ---- group -------------------------------------------------------------------------------------

/** A group of operations started together (as ncclGroupStart/End): gpuwire_group_start in the
 * constructor, gpuwire_group_end in end() or, if end() was not called, in the destructor.
 * Every operation this thread issues between them is started at the outermost end (groups
 * nest); blocking forms inside return at once, and for host memory their data is in place when
 * the group ends. end() throws the first error of the group's operations; the destructor
 * ignores it (call end() to see it). The group ends also while an exception unwinds the stack,
 * so the thread is never left inside a group; that end waits for the host operations already
 * issued, as gpuwire_group_end does. The operations run at the end: declare the memory they use
 * before the guard, so that it outlives it (destructors run in reverse order).
 *
 *     { gpuwire::group g; c.send(top, up, 0); c.send(bottom, down, 1);
 *       c.recv(ghost_top, up, 1); c.recv(ghost_bottom, down, 0); g.end(); } */
class group {
public:
    group() { detail::check(gpuwire_group_start()); }
    group(const group &) = delete;
    group &operator=(const group &) = delete;
    group(group &&) = delete;
    group &operator=(group &&) = delete;
    ~group()
    {
        if (open_)
            (void)gpuwire_group_end();
    }
    /** gpuwire_group_end now, throwing its error; a second call does nothing. */
    void end()
    {
        if (open_) {
            open_ = false;
            detail::check(gpuwire_group_end());
        }
    }
    /** gpuwire_group_depth: how deep the calling thread's groups are nested (0: none open). */
    static int depth()
    {
        int32_t d = 0;
        detail::check(gpuwire_group_depth(&d));
        return d;
    }

private:
    bool open_ = true;
};

// ---- darray ------------------------------------------------------------------------------------

/** Owns a gpuwire_darray (freed by the destructor): one global array split over the ranks of a
 * communicator, on host or device memory (see gpuwire.h). Methods name the C function they call.
 *
 * Host data (set_global, allgather, gather) passes as spans of the array's element type and
 * global length; scalars (fill values, alpha, the results of dot, sum, min, max) as values of the
 * element type; the `const void *` / `void *` forms take any address, for every datatype. A span
 * or scalar of another type or length is checked where the C function uses it: it goes to the C
 * call as NULL, so the call fails there (GPUWIRE_ERROR_NULL_ARGUMENT, which checking mode agrees
 * across the ranks of a collective, so none is left waiting), and the failure is thrown as the
 * GPUWIRE_ERROR_DTYPE_MISMATCH or GPUWIRE_ERROR_COUNT_MISMATCH it is. Where the C function does
 * not use the span (a SCATTER rank owning nothing in set_global, ranks other than 0 of a
 * BROADCAST set_global, ranks other than the root in gather) it may be empty. */
class darray {
public:
    darray() noexcept = default;
    /** Adopts a C handle (freed by this object). `comm_size` is not used: local_lens() asks
     * the array's communicator for its size (gpuwire_darray_comm), since a wrong one would
     * size its result wrong (kept so that code passing it compiles). */
    explicit darray(gpuwire_darray handle, int32_t comm_size = 0) noexcept : h_(handle), nranks_(0)
    {
        (void)comm_size;
    }
    darray(const darray &) = delete;
    darray &operator=(const darray &) = delete;
    darray(darray &&other) noexcept
        : h_(std::exchange(other.h_, GPUWIRE_DARRAY_NULL)),
          nranks_(std::exchange(other.nranks_, 0))
    {
    }
    darray &operator=(darray &&other) noexcept
    {
        if (this != &other) {
            reset();
            h_ = std::exchange(other.h_, GPUWIRE_DARRAY_NULL);
            nranks_ = std::exchange(other.nranks_, 0);
        }
        return *this;
    }
    ~darray() { reset(); }

    /** A 1-D array of `global_len` elements (gpuwire_darray_create; collective). `local_len`:
     * this rank's count, or GPUWIRE_DECIDE on every rank for the default split. */
    static darray create(const comm &c, int64_t global_len, int64_t local_len,
                         gpuwire_dtype dtype, gpuwire_space space = GPUWIRE_SPACE_HOST,
                         gpuwire_partition partition = GPUWIRE_PARTITION_SCATTER)
    {
        gpuwire_darray h = GPUWIRE_DARRAY_NULL;
        detail::check(
            gpuwire_darray_create(c.get(), global_len, local_len, dtype, space, partition, &h));
        darray d(h);
        d.nranks_ = c.size();
        return d;
    }
    template <class T>
    static darray create(const comm &c, int64_t global_len, int64_t local_len = GPUWIRE_DECIDE,
                         gpuwire_space space = GPUWIRE_SPACE_HOST,
                         gpuwire_partition partition = GPUWIRE_PARTITION_SCATTER)
    {
        return create(c, global_len, local_len, dtype_v<T>, space, partition);
    }
    /** An N-D array of global shape `shape` (row-major, split along axis 0 into whole rows) with
     * `halo` ghost rows above and below each block (gpuwire_darray_create_nd; collective). */
    static darray create_nd(const comm &c, span<const int64_t> shape, int64_t local_rows,
                            int64_t halo, gpuwire_dtype dtype,
                            gpuwire_space space = GPUWIRE_SPACE_HOST,
                            gpuwire_partition partition = GPUWIRE_PARTITION_SCATTER)
    {
        gpuwire_darray h = GPUWIRE_DARRAY_NULL;
        detail::check(gpuwire_darray_create_nd(c.get(), static_cast<int32_t>(shape.size()),
                                               shape.data(), local_rows, halo, dtype, space,
                                               partition, &h));
        darray d(h);
        d.nranks_ = c.size();
        return d;
    }
    template <class T>
    static darray create_nd(const comm &c, span<const int64_t> shape,
                            int64_t local_rows = GPUWIRE_DECIDE, int64_t halo = 0,
                            gpuwire_space space = GPUWIRE_SPACE_HOST,
                            gpuwire_partition partition = GPUWIRE_PARTITION_SCATTER)
    {
        return create_nd(c, shape, local_rows, halo, dtype_v<T>, space, partition);
    }
    /** An N-D SCATTER array on a process grid: `procs[a]` processes along axis a (0: chosen as
     * MPI_Dims_create), `halo[a]` ghosts on each side, `periodic[a]` 0 or 1; one entry per axis
     * each, or empty for all 0 (gpuwire_darray_create_cart; collective). */
    static darray create_cart(const comm &c, span<const int64_t> shape, span<const int64_t> procs,
                              span<const int64_t> halo, span<const int32_t> periodic,
                              gpuwire_dtype dtype, gpuwire_space space = GPUWIRE_SPACE_HOST)
    {
        gpuwire_darray h = GPUWIRE_DARRAY_NULL;
        const int32_t nd = axes(shape, procs, halo, periodic);
        const gpuwire_status s = gpuwire_darray_create_cart(c.get(), nd, shape.data(), opt(procs),
                                                            opt(halo), opt(periodic), dtype, space, &h);
        if (nd < 0)
            throw axes_error("gpuwire_darray_create_cart", shape, procs, halo, periodic);
        detail::check(s);
        darray d(h);
        d.nranks_ = c.size();
        return d;
    }
    /** As create_cart over the program's memory at `ptr` (this rank's block with its ghosts,
     * C order; the program keeps ownership; gpuwire_darray_wrap; collective). */
    static darray wrap(const comm &c, void *ptr, span<const int64_t> shape, span<const int64_t> procs,
                       span<const int64_t> halo, span<const int32_t> periodic, gpuwire_dtype dtype,
                       gpuwire_space space = GPUWIRE_SPACE_AUTO)
    {
        gpuwire_darray h = GPUWIRE_DARRAY_NULL;
        const int32_t nd = axes(shape, procs, halo, periodic);
        const gpuwire_status s = gpuwire_darray_wrap(c.get(), ptr, nd, shape.data(), opt(procs),
                                                     opt(halo), opt(periodic), dtype, space, &h);
        if (nd < 0)
            throw axes_error("gpuwire_darray_wrap", shape, procs, halo, periodic);
        detail::check(s);
        darray d(h);
        d.nranks_ = c.size();
        return d;
    }
    /** The decomposition, one entry per axis (gpuwire_darray_cart). */
    struct cart_info {
        std::vector<int64_t> procs, coords, starts, halo;
        std::vector<int32_t> periodic;
    };
    cart_info cart() const
    {
        std::size_t n = static_cast<std::size_t>(ndim());
        cart_info ci{std::vector<int64_t>(n), std::vector<int64_t>(n), std::vector<int64_t>(n),
                     std::vector<int64_t>(n), std::vector<int32_t>(n)};
        detail::check(gpuwire_darray_cart(h_, ci.procs.data(), ci.coords.data(), ci.starts.data(),
                                          ci.halo.data(), ci.periodic.data()));
        return ci;
    }

  private:
    template <class T> static const T *opt(span<const T> v) { return v.size() ? v.data() : nullptr; }
    /** ndim: shape's size; every non-empty list must match it (else -1: the C call fails on
     * every rank, in checking mode the others too, instead of their waiting; the caller then
     * throws axes_error, which names the lengths, not the ndim of -1). */
    static int32_t axes(span<const int64_t> shape, span<const int64_t> procs, span<const int64_t> halo,
                        span<const int32_t> periodic)
    {
        std::size_t n = shape.size();
        bool ok = (procs.size() == 0 || procs.size() == n) && (halo.size() == 0 || halo.size() == n) &&
                  (periodic.size() == 0 || periodic.size() == n);
        return ok ? static_cast<int32_t>(n) : -1;
    }
    static error axes_error(const char *fn, span<const int64_t> shape, span<const int64_t> procs,
                            span<const int64_t> halo, span<const int32_t> periodic)
    {
        return error(GPUWIRE_ERROR_INVALID_ARGUMENT,
                     std::string(fn) + ": shape has " + std::to_string(shape.size()) + " axes but procs has " +
                         std::to_string(procs.size()) + ", halo " + std::to_string(halo.size()) + " and periodic " +
                         std::to_string(periodic.size()) + " entries (one per axis each, or none)");
    }

  public:
    // queries (local)
    int64_t global_len() const { return query64(gpuwire_darray_global_len); }
    int64_t local_len() const { return query64(gpuwire_darray_local_len); }
    int64_t global_offset() const { return query64(gpuwire_darray_global_offset); }
    int64_t halo() const { return query64(gpuwire_darray_halo); }
    int32_t ndim() const { return query32(gpuwire_darray_ndim); }
    gpuwire_dtype dtype() const
    {
        return static_cast<gpuwire_dtype>(query32(gpuwire_darray_dtype));
    }
    gpuwire_space space() const
    {
        return static_cast<gpuwire_space>(query32(gpuwire_darray_space));
    }
    gpuwire_partition partition() const
    {
        return static_cast<gpuwire_partition>(query32(gpuwire_darray_partition));
    }
    /** The first owned element (gpuwire_darray_data; a device pointer for device arrays). */
    void *data() const
    {
        void *p = nullptr;
        detail::check(gpuwire_darray_data(h_, &p));
        return p;
    }
    /** The owned elements of a host-accessible array as a span of T; throws
     * GPUWIRE_ERROR_DTYPE_MISMATCH unless T is the array's type, GPUWIRE_ERROR_INVALID_ARGUMENT
     * for device memory and for a grid array with a halo on an axis after the first, whose owned
     * elements are not consecutive (local_with_halo() views the padded storage). */
    template <class T> span<T> host_span() const
    {
        if (dtype() != dtype_v<T>)
            throw error(GPUWIRE_ERROR_DTYPE_MISMATCH,
                        "gpuwire::darray::host_span: the array's datatype is not the span's");
        if (space() == GPUWIRE_SPACE_DEVICE)
            throw error(GPUWIRE_ERROR_INVALID_ARGUMENT,
                        "gpuwire::darray::host_span: the array is in device memory");
        const std::vector<int64_t> halo = cart().halo;
        for (std::size_t a = 1; a < halo.size(); a++)
            if (halo[a] != 0)
                throw error(GPUWIRE_ERROR_INVALID_ARGUMENT,
                            "gpuwire::darray::host_span: the array has a halo on an axis after the "
                            "first, so its owned elements are not consecutive (local_with_halo() "
                            "views the padded storage)");
        return span<T>(static_cast<T *>(data()), static_cast<std::size_t>(local_len()));
    }
    /** Every rank's number of owned elements, in rank order (gpuwire_darray_local_lens), one
     * per rank of the array's communicator (its size from create or create_nd, else
     * gpuwire_darray_comm). */
    std::vector<int64_t> local_lens() const
    {
        int32_t n = nranks_;
        if (n <= 0) {
            // An adopted handle: the array's own communicator says (gpuwire_darray_comm).
            gpuwire_comm c = GPUWIRE_COMM_NULL;
            detail::check(gpuwire_darray_comm(h_, &c, &n));
            (void)gpuwire_comm_free(c);
        }
        std::vector<int64_t> lens(static_cast<std::size_t>(n));
        detail::check(gpuwire_darray_local_lens(h_, lens.data()));
        return lens;
    }
    /** The global shape, row-major (gpuwire_darray_shape). */
    std::vector<int64_t> shape() const
    {
        std::vector<int64_t> s(static_cast<std::size_t>(ndim()));
        detail::check(gpuwire_darray_shape(h_, s.data()));
        return s;
    }
    /** This rank's shape: its row count, then the other dimensions
     * (gpuwire_darray_local_shape). */
    std::vector<int64_t> local_shape() const
    {
        std::vector<int64_t> s(static_cast<std::size_t>(ndim()));
        detail::check(gpuwire_darray_local_shape(h_, s.data()));
        return s;
    }
    /** A buffer viewing the owned elements (gpuwire_darray_local). */
    buffer local() const
    {
        gpuwire_buffer b = GPUWIRE_BUFFER_NULL;
        detail::check(gpuwire_darray_local(h_, &b));
        return buffer(b);
    }
    /** A buffer viewing the ghost rows above, the owned rows, the ghost rows below
     * (gpuwire_darray_local_with_halo). */
    buffer local_with_halo() const
    {
        gpuwire_buffer b = GPUWIRE_BUFFER_NULL;
        detail::check(gpuwire_darray_local_with_halo(h_, &b));
        return buffer(b);
    }

    // elementwise (local for SCATTER, collective for BROADCAST)
    /** Sets every owned element to *value (gpuwire_darray_fill). */
    void fill(const void *value, void *stream = nullptr) const
    {
        detail::check(gpuwire_darray_fill(h_, value, stream));
    }
    template <class T, class = std::enable_if_t<detail::has_dtype<T>::value>>
    void fill(const T &value, void *stream = nullptr) const
    {
        scalar("gpuwire_darray_fill", "value", dtype(), dtype_v<T>, &value,
               [&](const void *p) { return gpuwire_darray_fill(h_, p, stream); });
    }
    /** this = alpha x + this, on the owned elements (gpuwire_darray_axpy(alpha, x, this)). */
    void axpy(const void *alpha, const darray &x, void *stream = nullptr) const
    {
        detail::check(gpuwire_darray_axpy(alpha, x.get(), h_, stream));
    }
    template <class T, class = std::enable_if_t<detail::has_dtype<T>::value>>
    void axpy(const T &alpha, const darray &x, void *stream = nullptr) const
    {
        scalar("gpuwire_darray_axpy", "alpha", dtype(), dtype_v<T>, &alpha,
               [&](const void *p) { return gpuwire_darray_axpy(p, x.get(), h_, stream); });
    }
    /** this = alpha this (gpuwire_darray_scale). */
    void scale(const void *alpha, void *stream = nullptr) const
    {
        detail::check(gpuwire_darray_scale(h_, alpha, stream));
    }
    template <class T, class = std::enable_if_t<detail::has_dtype<T>::value>>
    void scale(const T &alpha, void *stream = nullptr) const
    {
        scalar("gpuwire_darray_scale", "alpha", dtype(), dtype_v<T>, &alpha,
               [&](const void *p) { return gpuwire_darray_scale(h_, p, stream); });
    }

    // reductions (collective for SCATTER, local for BROADCAST)
    /** sum_i conj(this_i) y_i into *result (gpuwire_darray_dot(this, y)). */
    void dot(const darray &y, void *result, void *stream = nullptr) const
    {
        detail::check(gpuwire_darray_dot(h_, y.get(), result, stream));
    }
    template <class T> T dot(const darray &y, void *stream = nullptr) const
    {
        T r{};
        scalar("gpuwire_darray_dot", "result", dtype(), dtype_v<T>, &r,
               [&](void *p) { return gpuwire_darray_dot(h_, y.get(), p, stream); });
        return r;
    }
    /** GPUWIRE_NORM_1, _2 or _INF, in double for every datatype (gpuwire_darray_norm). */
    double norm(gpuwire_norm kind = GPUWIRE_NORM_2, void *stream = nullptr) const
    {
        double r = 0.0;
        detail::check(gpuwire_darray_norm(h_, kind, &r, stream));
        return r;
    }
    /** gpuwire_darray_sum into *result. */
    void sum(void *result, void *stream = nullptr) const
    {
        detail::check(gpuwire_darray_sum(h_, result, stream));
    }
    template <class T> T sum(void *stream = nullptr) const
    {
        T r{};
        scalar("gpuwire_darray_sum", "result", dtype(), dtype_v<T>, &r,
               [&](void *p) { return gpuwire_darray_sum(h_, p, stream); });
        return r;
    }
    /** gpuwire_darray_min into *result. */
    void min(void *result, void *stream = nullptr) const
    {
        detail::check(gpuwire_darray_min(h_, result, stream));
    }
    template <class T> T min(void *stream = nullptr) const
    {
        T r{};
        scalar("gpuwire_darray_min", "result", dtype(), dtype_v<T>, &r,
               [&](void *p) { return gpuwire_darray_min(h_, p, stream); });
        return r;
    }
    /** gpuwire_darray_max into *result. */
    void max(void *result, void *stream = nullptr) const
    {
        detail::check(gpuwire_darray_max(h_, result, stream));
    }
    template <class T> T max(void *stream = nullptr) const
    {
        T r{};
        scalar("gpuwire_darray_max", "result", dtype(), dtype_v<T>, &r,
               [&](void *p) { return gpuwire_darray_max(h_, p, stream); });
        return r;
    }

    // data movement
    /** This rank's part of the global host array `src` (gpuwire_darray_set_global). */
    void set_global(const void *src, void *stream = nullptr) const
    {
        detail::check(gpuwire_darray_set_global(h_, src, stream));
    }
    template <class T> void set_global(span<T> src, void *stream = nullptr) const
    {
        host("gpuwire_darray_set_global", dtype_v<T>, src.size(), src.data(),
             [&](const void *p) { return gpuwire_darray_set_global(h_, p, stream); });
    }
    /** The whole array into every rank's host array `dst` (gpuwire_darray_allgather). */
    void allgather(void *dst, void *stream = nullptr) const
    {
        detail::check(gpuwire_darray_allgather(h_, dst, stream));
    }
    template <class T> void allgather(span<T> dst, void *stream = nullptr) const
    {
        static_assert(!std::is_const<T>::value, "gpuwire::darray::allgather writes into dst");
        host("gpuwire_darray_allgather", dtype_v<T>, dst.size(), dst.data(),
             [&](void *p) { return gpuwire_darray_allgather(h_, p, stream); });
    }
    /** The whole array into `root`'s host array `dst` (gpuwire_darray_gather; other ranks may
     * pass nullptr or an empty span). */
    void gather(void *dst, int32_t root, void *stream = nullptr) const
    {
        detail::check(gpuwire_darray_gather(h_, dst, root, stream));
    }
    template <class T> void gather(span<T> dst, int32_t root, void *stream = nullptr) const
    {
        static_assert(!std::is_const<T>::value, "gpuwire::darray::gather writes into dst");
        host("gpuwire_darray_gather", dtype_v<T>, dst.size(), dst.data(),
             [&](void *p) { return gpuwire_darray_gather(h_, p, root, stream); });
    }
    /** Copies this array's values into `dst`, split as `dst` is (gpuwire_darray_redistribute). */
    void redistribute(const darray &dst, void *stream = nullptr) const
    {
        detail::check(gpuwire_darray_redistribute(h_, dst.get(), stream));
    }
    /** BROADCAST arrays: every rank's copy becomes `root`'s (gpuwire_darray_bcast). */
    void bcast(int32_t root, void *stream = nullptr) const
    {
        detail::check(gpuwire_darray_bcast(h_, root, stream));
    }
    /** Fills `width` ghost rows on each side from the neighbouring blocks
     * (gpuwire_darray_halo_exchange). */
    void halo_exchange(int64_t width, void *stream = nullptr) const
    {
        detail::check(gpuwire_darray_halo_exchange(h_, width, stream));
    }
    /** Halo exchange of every axis: `widths` one per axis (empty: the array's halos), `flags`
     * 0 (faces, one group) or GPUWIRE_HALO_CORNERS (gpuwire_darray_halo_exchange_axes).
     * Another number of widths is GPUWIRE_ERROR_INVALID_ARGUMENT, reported through the C call
     * (widths of -1) so that, in checking mode, the other ranks fail too instead of waiting. */
    void halo_exchange_axes(span<const int64_t> widths = {}, int32_t flags = 0,
                            void *stream = nullptr) const
    {
        const std::size_t nd = static_cast<std::size_t>(ndim());
        if (!widths.empty() && widths.size() != nd) {
            std::vector<int64_t> bad(nd > 0 ? nd : 1, -1);
            (void)gpuwire_darray_halo_exchange_axes(h_, bad.data(), flags, stream);
            throw error(GPUWIRE_ERROR_INVALID_ARGUMENT,
                        "gpuwire_darray_halo_exchange_axes: " + std::to_string(widths.size()) +
                            " widths for an array of ndim " + std::to_string(nd) +
                            " (one per axis)");
        }
        detail::check(gpuwire_darray_halo_exchange_axes(h_, opt(widths), flags, stream));
    }

    gpuwire_darray get() const noexcept { return h_; }
    gpuwire_darray release() noexcept
    {
        nranks_ = 0;
        return std::exchange(h_, GPUWIRE_DARRAY_NULL);
    }
    explicit operator bool() const noexcept { return h_.h != 0; }
    /** Frees the array now, reporting errors (gpuwire_darray_free); NULL afterwards. */
    void free()
    {
        if (h_.h != 0)
            detail::check(gpuwire_darray_free(std::exchange(h_, GPUWIRE_DARRAY_NULL)));
    }
    /** Frees it now, ignoring errors (what the destructor does). */
    void reset() noexcept
    {
        if (h_.h != 0)
            (void)gpuwire_darray_free(std::exchange(h_, GPUWIRE_DARRAY_NULL));
    }

private:
    int64_t query64(gpuwire_status (*f)(gpuwire_darray, int64_t *)) const
    {
        int64_t v = 0;
        detail::check(f(h_, &v));
        return v;
    }
    int32_t query32(gpuwire_status (*f)(gpuwire_darray, int32_t *)) const
    {
        int32_t v = 0;
        detail::check(f(h_, &v));
        return v;
    }
    /** A scalar of type `given` at p for an array of `mine`: NULL to the C call on a mismatch. */
    template <class P, class F>
    static void scalar(const char *what, const char *arg, gpuwire_dtype mine, gpuwire_dtype given,
                       P *p, F &&call)
    {
        const bool fits = mine == given;
        gpuwire_status st = call(fits ? p : nullptr);
        if (!fits && st == GPUWIRE_ERROR_NULL_ARGUMENT)
            throw error(GPUWIRE_ERROR_DTYPE_MISMATCH,
                        std::string(what) + ": " + arg + " is " + detail::dtype_name(given) +
                            ", the distributed array holds " + detail::dtype_name(mine));
        detail::check(st);
    }
    /** A host span of n elements of `given` at p: NULL to the C call unless it has the array's
     * datatype and global length. */
    template <class P, class F>
    void host(const char *what, gpuwire_dtype given, std::size_t n, P *p, F &&call) const
    {
        const gpuwire_dtype mine = dtype();
        const int64_t len = global_len();
        const bool fits = mine == given && static_cast<int64_t>(n) == len;
        gpuwire_status st = call(fits ? p : nullptr);
        if (!fits && st == GPUWIRE_ERROR_NULL_ARGUMENT) {
            if (mine != given)
                throw error(GPUWIRE_ERROR_DTYPE_MISMATCH,
                            std::string(what) + ": the span holds " + detail::dtype_name(given) +
                                ", the distributed array " + detail::dtype_name(mine));
            throw error(GPUWIRE_ERROR_COUNT_MISMATCH,
                        std::string(what) + ": the span has " + std::to_string(n) +
                            " elements, the distributed array " + std::to_string(len));
        }
        detail::check(st);
    }

    gpuwire_darray h_ = GPUWIRE_DARRAY_NULL;
    int32_t nranks_ = 0;
};

} // namespace gpuwire

#endif // GPUWIRE_HPP
