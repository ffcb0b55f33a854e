#!/usr/bin/env node
'use strict';
// Conformance replay: runs the article's scheduler (article_scheduler.js) on a trace under a virtual clock.
//
//   node replay.js TRACE.csv OPTIONS.json OUT.csv
//
// Virtual clock:
//   * Date.now is replaced by the virtual time; timers live in our own queue ordered by (time, creation seq).
//   * All arrivals are scheduled up front, in trace order after a stable sort by arrival_ms, so arrivals at
//     the same instant are submitted in trace order and come before any finish at that instant.
//   * A task's execute() is a virtual sleep of service_ms; its finish timer is created when execute() is
//     invoked, i.e. in start order. Finishes at the same instant are therefore handled in start order.
//   * Run loop: pop the earliest timer, set the virtual now, run its callback, then let every pending
//     microtask settle (real setImmediate, repeated until nothing changes) before the next timer. So a
//     finishing task's bookkeeping and drain() complete before the next event.
// Output: id,kind,arrival_ms,start_ms,end_ms in trace row order; start/end empty for tasks that never
// started (stranded). Numbers are printed with JavaScript's default Number -> string conversion.

const fs = require('fs');
const path = require('path');
const { LmTrafficScheduler } = require('./article_scheduler.js');

// ------------------------------------------------------------------ CSV
function parseCsv(text) {
  const rows = [];
  let row = [];
  let field = '';
  let i = 0;
  let inQuotes = false;
  let fieldStarted = false;
  while (i < text.length) {
    const c = text[i];
    if (inQuotes) {
      if (c === '"') {
        if (text[i + 1] === '"') {
          field += '"';
          i += 2;
          continue;
        }
        inQuotes = false;
        i += 1;
        continue;
      }
      field += c;
      i += 1;
      continue;
    }
    if (c === '"' && field === '') {
      inQuotes = true;
      fieldStarted = true;
      i += 1;
      continue;
    }
    if (c === ',') {
      row.push(field);
      field = '';
      fieldStarted = true;
      i += 1;
      continue;
    }
    if (c === '\r' || c === '\n') {
      if (fieldStarted || field !== '' || row.length > 0) {
        row.push(field);
        rows.push(row);
      }
      row = [];
      field = '';
      fieldStarted = false;
      i += c === '\r' && text[i + 1] === '\n' ? 2 : 1;
      continue;
    }
    field += c;
    fieldStarted = true;
    i += 1;
  }
  if (fieldStarted || field !== '' || row.length > 0) {
    row.push(field);
    rows.push(row);
  }
  return rows;
}

function csvField(s) {
  s = String(s);
  return /[",\r\n]/.test(s) ? '"' + s.replace(/"/g, '""') + '"' : s;
}

function parseNumber(s, what) {
  const t = String(s).trim();
  const v = Number(t);
  if (t === '' || !Number.isFinite(v)) {
    throw new Error(`bad number for ${what}: ${JSON.stringify(s)}`);
  }
  return v;
}

function readTrace(file) {
  let text = fs.readFileSync(file, 'utf8');
  if (text.charCodeAt(0) === 0xfeff) text = text.slice(1);
  const rows = parseCsv(text);
  if (rows.length === 0) throw new Error(`${file}: empty trace`);
  const header = rows[0].map((h) => h.trim());
  const col = {};
  for (const name of ['id', 'kind', 'arrival_ms', 'service_ms']) {
    const idx = header.indexOf(name);
    if (idx < 0) throw new Error(`${file}: missing column ${name}`);
    col[name] = idx;
  }
  const tasks = [];
  for (let r = 1; r < rows.length; r++) {
    const row = rows[r];
    if (row.length === 1 && row[0].trim() === '') continue;
    const kind = row[col.kind].trim();
    if (kind !== 'interactive' && kind !== 'batch') {
      throw new Error(`${file}: row ${r + 1}: bad kind ${JSON.stringify(kind)}`);
    }
    tasks.push({
      row: tasks.length,
      id: row[col.id].trim(),
      kind,
      arrival: parseNumber(row[col.arrival_ms], `arrival_ms row ${r + 1}`),
      service: parseNumber(row[col.service_ms], `service_ms row ${r + 1}`),
      start: undefined,
      end: undefined,
    });
  }
  return tasks;
}

// ------------------------------------------------------------------ virtual clock
class TimerQueue {
  constructor() {
    this.heap = [];
  }
  static before(a, b) {
    return a.time < b.time || (a.time === b.time && a.seq < b.seq);
  }
  push(t) {
    const h = this.heap;
    h.push(t);
    let i = h.length - 1;
    while (i > 0) {
      const p = (i - 1) >> 1;
      if (!TimerQueue.before(h[i], h[p])) break;
      [h[i], h[p]] = [h[p], h[i]];
      i = p;
    }
  }
  pop() {
    const h = this.heap;
    const top = h[0];
    const last = h.pop();
    if (h.length > 0) {
      h[0] = last;
      let i = 0;
      for (;;) {
        const l = 2 * i + 1;
        const r = l + 1;
        let m = i;
        if (l < h.length && TimerQueue.before(h[l], h[m])) m = l;
        if (r < h.length && TimerQueue.before(h[r], h[m])) m = r;
        if (m === i) break;
        [h[i], h[m]] = [h[m], h[i]];
        i = m;
      }
    }
    return top;
  }
  get size() {
    return this.heap.length;
  }
}

let virtualNow = 0;
let timerSeq = 0;
let activity = 0; // bumped by every timer creation / execute / finish, to detect quiescence
const timers = new TimerQueue();

function virtualSetTimeout(cb, delay) {
  activity++;
  timers.push({ time: virtualNow + delay, seq: timerSeq++, cb });
}

function virtualSetTimeoutAt(cb, time) {
  activity++;
  timers.push({ time, seq: timerSeq++, cb });
}

const realSetImmediate = setImmediate;
async function settle() {
  // Microtasks are all run before the event loop reaches the check phase, so one setImmediate already
  // settles everything; repeat until a full round shows no activity, to be safe.
  for (;;) {
    const before = activity;
    await new Promise((r) => realSetImmediate(r));
    if (activity === before) return;
  }
}

// ------------------------------------------------------------------ main
function loadOptions(file) {
  const raw = JSON.parse(fs.readFileSync(file, 'utf8'));
  const policy = raw.policy ?? 'adaptive';
  if (policy !== 'adaptive' && policy !== 'unscheduled') {
    throw new Error(`unknown policy ${JSON.stringify(policy)}`);
  }
  const tieBreak = raw.tieBreak ?? 'fifo';
  if (tieBreak !== 'fifo' && tieBreak !== 'seed-heap') {
    throw new Error(`unknown tieBreak ${JSON.stringify(tieBreak)}`);
  }
  const options = { policy, tieBreak };
  if (policy === 'adaptive') {
    for (const k of [
      'maxConcurrency',
      'batchMaxConcurrency',
      'batchMinConcurrency',
      'interactiveRpsThreshold',
      'interactiveP95LatencyMs',
    ]) {
      if (typeof raw[k] !== 'number') throw new Error(`options: ${k} must be a number`);
      options[k] = raw[k];
    }
  }
  if (raw.windowMs !== undefined && raw.windowMs !== null) options.windowMs = raw.windowMs;
  if (raw.smoothingAlpha !== undefined && raw.smoothingAlpha !== null) {
    options.smoothingAlpha = raw.smoothingAlpha;
  }
  return options;
}

async function main(argv) {
  if (argv.length !== 3) {
    process.stderr.write('usage: node replay.js TRACE.csv OPTIONS.json OUT.csv\n');
    process.exit(2);
  }
  const [traceFile, optionsFile, outFile] = argv;
  const tasks = readTrace(traceFile);
  const options = loadOptions(optionsFile);

  Date.now = () => virtualNow;

  const scheduler =
    options.policy === 'adaptive' ? new LmTrafficScheduler(options) : null;

  const makeExecute = (t) => () => {
    activity++;
    t.start = Date.now();
    return new Promise((resolve) => {
      virtualSetTimeout(() => {
        activity++;
        t.end = Date.now();
        resolve();
      }, t.service);
    });
  };

  // Schedule all arrivals up front: stable sort by arrival_ms, then creation order = that order.
  const order = tasks.slice().sort((a, b) => a.arrival - b.arrival || a.row - b.row);
  for (const t of order) {
    const execute = makeExecute(t);
    virtualSetTimeoutAt(() => {
      if (scheduler) {
        scheduler.submit(t.kind, t.id, execute);
      } else {
        // "unscheduled": the article's Promise.all arm, every task starts on arrival.
        execute();
      }
    }, t.arrival);
  }

  while (timers.size > 0) {
    const timer = timers.pop();
    if (timer.time < virtualNow) throw new Error('virtual clock went backwards');
    virtualNow = timer.time;
    timer.cb();
    await settle();
  }

  const lines = ['id,kind,arrival_ms,start_ms,end_ms'];
  for (const t of tasks) {
    if ((t.start === undefined) !== (t.end === undefined)) {
      throw new Error(`task ${t.id} started but never ended`);
    }
    lines.push(
      [
        csvField(t.id),
        t.kind,
        String(t.arrival),
        t.start === undefined ? '' : String(t.start),
        t.end === undefined ? '' : String(t.end),
      ].join(',')
    );
  }
  fs.mkdirSync(path.dirname(path.resolve(outFile)), { recursive: true });
  fs.writeFileSync(outFile, lines.join('\n') + '\n');
  if (scheduler) {
    const stranded = tasks.filter((t) => t.start === undefined).length;
    if (stranded > 0 && scheduler.running !== 0) throw new Error('tasks still running at the end');
    process.stderr.write(
      `replay: ${tasks.length} tasks, ${stranded} never started, ` +
        `interactive queue ${scheduler.interactiveQueue.size}, batch queue ${scheduler.batchQueue.size}\n`
    );
  }
}

main(process.argv.slice(2)).catch((err) => {
  process.stderr.write(`replay.js: ${err && err.stack ? err.stack : err}\n`);
  process.exit(1);
});
