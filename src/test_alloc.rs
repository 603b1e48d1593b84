//! The unit tests' allocator: the system allocator, counting what each thread holds, so a
//! test can assert how much memory a function needs ([`peak_during`]) without a kernel
//! figure that other tests' threads (and the heap's own caching) blur.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

/// The system allocator, counting the bytes the current thread allocated and freed.
struct Counting;

thread_local! {
    /// Bytes this thread holds (allocated less freed; a block freed by another thread
    /// than its allocator's counts on the freeing thread), and its peak.
    static HELD: Cell<(isize, isize)> = const { Cell::new((0, 0)) };
}

fn count(delta: isize) {
    // `try_with`: nothing to count on once the thread's locals are gone.
    let _ = HELD.try_with(|held| {
        let (now, peak) = held.get();
        held.set((now + delta, peak.max(now + delta)));
    });
}

unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        count(layout.size() as isize);
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        count(-(layout.size() as isize));
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        count(layout.size() as isize);
        unsafe { System.alloc_zeroed(layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // Both blocks count while they may both exist.
        count(new_size as isize);
        let new = unsafe { System.realloc(ptr, layout, new_size) };
        count(-(layout.size() as isize));
        new
    }
}

#[global_allocator]
static COUNTING: Counting = Counting;

/// Runs `f` on this thread and returns its result with the most bytes this thread held
/// at once while it ran, beyond what it held before (its result included, if it
/// allocates).
pub fn peak_during<T>(f: impl FnOnce() -> T) -> (T, usize) {
    let start = HELD.with(|held| {
        let (now, _) = held.get();
        held.set((now, now));
        now
    });
    let out = f();
    let (_, peak) = HELD.with(Cell::get);
    (out, (peak - start).max(0) as usize)
}
