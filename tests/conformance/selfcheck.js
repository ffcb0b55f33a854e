#!/usr/bin/env node
'use strict';
// Hand-worked checks of replay.js + article_scheduler.js against docs/reference-policy.md.
//   node tests/conformance/selfcheck.js      (exit 0 = all pass)
// Each scenario's expected rows were derived by hand; the reasoning is in the comments.

const fs = require('fs');
const os = require('os');
const path = require('path');
const { spawnSync } = require('child_process');

const REPLAY = path.join(__dirname, 'replay.js');

function run(name, traceRows, options, expected) {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'simlab-selfcheck-'));
  const trace = path.join(dir, 'trace.csv');
  const opts = path.join(dir, 'options.json');
  const out = path.join(dir, 'out.csv');
  fs.writeFileSync(
    trace,
    'id,kind,arrival_ms,service_ms\n' + traceRows.map((r) => r.join(',')).join('\n') + '\n'
  );
  fs.writeFileSync(opts, JSON.stringify(options));
  const p = spawnSync(process.execPath, [REPLAY, trace, opts, out], { encoding: 'utf8' });
  if (p.status !== 0) {
    throw new Error(`${name}: replay failed: ${p.stderr}`);
  }
  const got = fs.readFileSync(out, 'utf8').trim().split('\n');
  const want = ['id,kind,arrival_ms,start_ms,end_ms', ...expected.map((r) => r.join(','))];
  fs.rmSync(dir, { recursive: true, force: true });
  const bad = [];
  for (let i = 0; i < Math.max(got.length, want.length); i++) {
    if (got[i] !== want[i]) bad.push(`  line ${i + 1}: got ${got[i]} want ${want[i]}`);
  }
  if (bad.length) {
    console.log(`FAIL ${name}\n${bad.join('\n')}`);
    return false;
  }
  console.log(`ok   ${name}`);
  return true;
}

const results = [];

// 1. Three batch + two interactive tasks.
// max 2, batch cap 2 at pressure 0, 1 at pressure 1; p95 threshold 100 ms, rps threshold huge.
// t=0   submit b1: window empty -> pressure 0 -> limit round(2-1*0)=2 -> b1 starts 0.
//       submit b2: limit 2, batchRunning 1 -> b2 starts 0. running 2. submit b3: running==max, queued.
// t=10  i1, i2 queued (running == max).
// t=100 b1 finishes (its timer was created first): drain pops i1 (FIFO) -> starts 100; running 2.
//       b2 finishes: drain pops i2 -> starts 100.
// t=120 i1 finishes: sample 120-10=110 -> p95 110/100 -> pressure 1 -> limit round(2-1)=1,
//       batchRunning 0 < 1 -> b3 starts 120 (ends 170).
// t=130 i2 finishes: limit 1, batchRunning 1 -> stop.   t=170 b3 finishes: batch queue empty.
results.push(
  run(
    'three batch + two interactive',
    [
      ['b1', 'batch', 0, 100],
      ['b2', 'batch', 0, 100],
      ['b3', 'batch', 0, 50],
      ['i1', 'interactive', 10, 20],
      ['i2', 'interactive', 10, 30],
    ],
    {
      maxConcurrency: 2,
      batchMaxConcurrency: 2,
      batchMinConcurrency: 1,
      interactiveRpsThreshold: 1000,
      interactiveP95LatencyMs: 100,
    },
    [
      ['b1', 'batch', 0, 0, 100],
      ['b2', 'batch', 0, 0, 100],
      ['b3', 'batch', 0, 120, 170],
      ['i1', 'interactive', 10, 100, 120],
      ['i2', 'interactive', 10, 100, 130],
    ]
  )
);

// 2. Tie-break among equal priorities. One slot; b1..b4 arrive at 0, 10 ms each.
// b1 starts at 0; queue holds b2,b3,b4. FIFO: b2@10, b3@20, b4@30.
// Article heap: array [b2,b3,b4] (no swaps among equals). pop -> b2, last (b4) moved to root -> [b4,b3];
// pop -> b4; then b3. So b2@10, b4@20, b3@30.
const tieTrace = [
  ['b1', 'batch', 0, 10],
  ['b2', 'batch', 0, 10],
  ['b3', 'batch', 0, 10],
  ['b4', 'batch', 0, 10],
];
const tieOpts = {
  maxConcurrency: 1,
  batchMaxConcurrency: 1,
  batchMinConcurrency: 1,
  interactiveRpsThreshold: 10,
  interactiveP95LatencyMs: 100,
};
results.push(
  run('tie-break fifo', tieTrace, { ...tieOpts, tieBreak: 'fifo' }, [
    ['b1', 'batch', 0, 0, 10],
    ['b2', 'batch', 0, 10, 20],
    ['b3', 'batch', 0, 20, 30],
    ['b4', 'batch', 0, 30, 40],
  ])
);
results.push(
  run('tie-break seed-heap', tieTrace, { ...tieOpts, tieBreak: 'seed-heap' }, [
    ['b1', 'batch', 0, 0, 10],
    ['b2', 'batch', 0, 10, 20],
    ['b3', 'batch', 0, 30, 40],
    ['b4', 'batch', 0, 20, 30],
  ])
);

// 3. Stranded batch task with batchMinConcurrency = 0.
// t=0  i1 starts (limit evaluated with empty window: round(1-1*0)=1, batch queue empty).
// t=1  b1: limit 1 -> starts 1, ends 11.   t=11 b1 ends: batch queue empty.
// t=50 i1 ends: latency 50 > 10 -> pressure 1 -> limit max(0, round(1-1))=0.
// t=100 b2 arrives: sample at 50 still inside the 10 s window -> limit 0 -> never starts.
results.push(
  run(
    'stranded with batchMinConcurrency 0',
    [
      ['i1', 'interactive', 0, 50],
      ['b1', 'batch', 1, 10],
      ['b2', 'batch', 100, 10],
    ],
    {
      maxConcurrency: 2,
      batchMaxConcurrency: 1,
      batchMinConcurrency: 0,
      interactiveRpsThreshold: 1000,
      interactiveP95LatencyMs: 10,
    },
    [
      ['i1', 'interactive', 0, 0, 50],
      ['b1', 'batch', 1, 1, 11],
      ['b2', 'batch', 100, '', ''],
    ]
  )
);

// 4. Window expiry is only noticed on the next event (windowMs 100). i1 ends at 50 (sample ts 50).
// t=150 b3 arrives: 150-50 = 100 is not > 100, the sample stays -> pressure 1 -> limit 0 -> queued.
// t=151 b2 arrives: 151-50 = 101 > 100 -> window empty -> limit 1 -> the batch queue pops b3 (FIFO),
//       b3 starts 151; next pass batchRunning 1 >= 1 -> stop. t=161 b3 ends -> limit 1 -> b2 starts 161.
results.push(
  run(
    'window expiry is only seen on the next event',
    [
      ['i1', 'interactive', 0, 50],
      ['b3', 'batch', 150, 10],
      ['b2', 'batch', 151, 10],
    ],
    {
      maxConcurrency: 2,
      batchMaxConcurrency: 1,
      batchMinConcurrency: 0,
      interactiveRpsThreshold: 1000,
      interactiveP95LatencyMs: 10,
      windowMs: 100,
    },
    [
      ['i1', 'interactive', 0, 0, 50],
      ['b3', 'batch', 150, 151, 161],
      ['b2', 'batch', 151, 161, 171],
    ]
  )
);

// 5. Per-evaluation smoothing, alpha 0.5, batch cap 4..0, p95 threshold 100.
// eval#1 t=0 (after i1 starts, interactive queue empty): raw 0 -> s=0 -> limit 4; batch queue empty.
// eval#2 t=100 (i1 ends, latency 100 -> raw 1): s=0.5 -> limit round(4-2)=2; batch queue empty.
// t=200 b1: eval#3 s=0.75 -> round(4-3)=1 -> b1 starts 200; loop: eval#4 s=0.875 -> 4-3.5=0.5 ->
//       Math.round(0.5)=1 (Python's round would give 0) -> batchRunning 1 >= 1 -> stop.
// t=200 b2: eval#5 s=0.9375 -> round(0.25)=0 -> stop. b3: s=0.96875 -> 0. t=1200 b1 ends: still 0.
// So b2, b3 never start.
results.push(
  run(
    'per-evaluation EMA and Math.round(0.5)',
    [
      ['i1', 'interactive', 0, 100],
      ['b1', 'batch', 200, 1000],
      ['b2', 'batch', 200, 1000],
      ['b3', 'batch', 200, 1000],
    ],
    {
      maxConcurrency: 10,
      batchMaxConcurrency: 4,
      batchMinConcurrency: 0,
      interactiveRpsThreshold: 1e9,
      interactiveP95LatencyMs: 100,
      smoothingAlpha: 0.5,
    },
    [
      ['i1', 'interactive', 0, 0, 100],
      ['b1', 'batch', 200, 200, 1200],
      ['b2', 'batch', 200, '', ''],
      ['b3', 'batch', 200, '', ''],
    ]
  )
);

// 6. Same-instant ordering: arrivals before finishes at one instant, zero service times.
// max 1. a1 (batch, 0, 5) starts at 0. i1 arrives at 5 (arrival timers are created first, so i1's
// arrival is handled before a1's finish at 5): queued. a1 finishes at 5 -> i1 starts at 5, service 0,
// its finish timer is at 5 too (created later) -> i1 ends 5 -> drain: limit 1 (range 0), b2 starts 5.
// b2 (arrived 5 after i1, trace order) ends 5+0=5; z3 arrived at 5 too, starts 5 after b2 ends.
results.push(
  run(
    'same-instant arrivals, finishes and zero service',
    [
      ['a1', 'batch', 0, 5],
      ['i1', 'interactive', 5, 0],
      ['b2', 'batch', 5, 0],
      ['z3', 'batch', 5, 2.5],
    ],
    {
      maxConcurrency: 1,
      batchMaxConcurrency: 1,
      batchMinConcurrency: 1,
      interactiveRpsThreshold: 1,
      interactiveP95LatencyMs: 1,
    },
    [
      ['a1', 'batch', 0, 0, 5],
      ['i1', 'interactive', 5, 5, 5],
      ['b2', 'batch', 5, 5, 5],
      ['z3', 'batch', 5, 5, 7.5],
    ]
  )
);

// 7. Unscheduled arm: every task starts at its arrival; unsorted trace rows keep their output order.
results.push(
  run(
    'unscheduled',
    [
      ['x', 'batch', 3.25, 1e3],
      ['y', 'interactive', 0.1, 0.2],
    ],
    { policy: 'unscheduled' },
    [
      ['x', 'batch', 3.25, 3.25, 1003.25],
      ['y', 'interactive', 0.1, 0.1, 0.30000000000000004],
    ]
  )
);

// 8. Stable sort by arrival: rows out of time order; equal arrivals keep trace order.
// max 1, all batch, service 1. Sorted arrival order: c(0), a(2), b(2). c 0-1, a 2-3, b queued -> 3-4.
results.push(
  run(
    'unsorted trace rows',
    [
      ['a', 'batch', 2, 1],
      ['b', 'batch', 2, 1],
      ['c', 'batch', 0, 1],
    ],
    {
      maxConcurrency: 1,
      batchMaxConcurrency: 1,
      batchMinConcurrency: 1,
      interactiveRpsThreshold: 1,
      interactiveP95LatencyMs: 1,
    },
    [
      ['a', 'batch', 2, 2, 3],
      ['b', 'batch', 2, 3, 4],
      ['c', 'batch', 0, 0, 1],
    ]
  )
);

const failed = results.filter((r) => !r).length;
console.log(failed ? `${failed} scenario(s) FAILED` : `all ${results.length} scenarios passed`);
process.exit(failed ? 1 : 0);
