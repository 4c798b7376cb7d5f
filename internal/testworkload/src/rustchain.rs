// A Rust release build (std only, no frame pointers):
// main -> level1 -> level2 -> level3 -> hot.
use std::hint::black_box;

#[inline(never)]
fn hot(n: u64) -> u64 {
    let mut x = n;
    for _ in 0..1_000_000 {
        x = x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
    }
    x
}

#[inline(never)]
fn level3(n: u64) -> u64 {
    let v: Vec<u64> = vec![n; 4];
    black_box(hot(black_box(v[3]))) + 3
}

#[inline(never)]
fn level2(n: u64) -> u64 {
    black_box(level3(black_box(n + 2))) + 2
}

#[inline(never)]
fn level1(n: u64) -> u64 {
    black_box(level2(black_box(n + 1))) + 1
}

fn main() {
    let mut i = 0u64;
    loop {
        black_box(level1(black_box(i)));
        i += 1;
    }
}
