// sleeper.js sleeps, over and over, in napLeaf, called from napOuter: each
// wait blocks the thread in the kernel (Atomics.wait on a futex) for 20 ms.
'use strict';

const cell = new Int32Array(new SharedArrayBuffer(4));

function napLeaf() {
  Atomics.wait(cell, 0, 0, 20);
}

function napOuter() {
  napLeaf();
}

for (;;) {
  napOuter();
}
