'use strict';
// Plain-JavaScript (CommonJS, Node 20, no dependencies) port of the article's TypeScript scheduler
// (the article's sections 5.1-5.3), logic kept verbatim; see docs/reference-policy.md.
// The article's code lost most punctuation when captured; operators below follow docs/reference-policy.md.
//
// The ONLY additions to the article's code (each marked "ADDITION"):
//   (a) options.smoothingAlpha: the per-evaluation EMA of the article's section 8.3, applied to `pressure`
//       inside allowedBatchConcurrency when the option is set (state `smoothed = 0` kept between evaluations);
//   (b) options.tieBreak: "fifo" makes each queue FIFO among equal priorities by comparing
//       (priority, insertion sequence); "seed-heap" (or absent) is the article's heap unchanged.
// The "unscheduled" arm (the article's Promise.all baseline) lives in replay.js, not here.

// ---------------------------------------------------------------------------------------------
// src/priority-queue.ts
// ---------------------------------------------------------------------------------------------
class PriorityQueue {
  // ADDITION (b): tieBreak argument and insertion counter. Default = the article's heap.
  constructor(tieBreak) {
    this.heap = [];
    this.fifo = tieBreak === 'fifo';
    this.seq = 0;
  }

  push(task) {
    if (this.fifo) {
      task.seq = this.seq++; // ADDITION (b)
    }
    this.heap.push(task);
    this.bubbleUp(this.heap.length - 1);
  }

  pop() {
    if (this.heap.length === 0) {
      return undefined;
    }
    const top = this.heap[0];
    const last = this.heap.pop();
    if (this.heap.length > 0) {
      this.heap[0] = last;
      this.sinkDown(0);
    }
    return top;
  }

  get size() {
    return this.heap.length;
  }

  // ADDITION (b): the article compares `.priority` directly; with seed-heap these two helpers are
  // exactly the article's expressions `a.priority <= b.priority` and `a.priority < b.priority`.
  lessOrEqual(a, b) {
    if (!this.fifo) {
      return a.priority <= b.priority;
    }
    return a.priority < b.priority || (a.priority === b.priority && a.seq <= b.seq);
  }

  less(a, b) {
    if (!this.fifo) {
      return a.priority < b.priority;
    }
    return a.priority < b.priority || (a.priority === b.priority && a.seq < b.seq);
  }

  bubbleUp(index) {
    while (index > 0) {
      const parent = Math.floor((index - 1) / 2);
      // article: if (this.heap[parent].priority <= this.heap[index].priority) { break; }
      if (this.lessOrEqual(this.heap[parent], this.heap[index])) {
        break;
      }
      [this.heap[parent], this.heap[index]] = [
        this.heap[index],
        this.heap[parent],
      ];
      index = parent;
    }
  }

  sinkDown(index) {
    const n = this.heap.length;
    while (true) {
      let smallest = index;
      const left = 2 * index + 1;
      const right = 2 * index + 2;
      // article: if (left < n && this.heap[left].priority < this.heap[smallest].priority)
      if (left < n && this.less(this.heap[left], this.heap[smallest])) {
        smallest = left;
      }
      // article: if (right < n && this.heap[right].priority < this.heap[smallest].priority)
      if (right < n && this.less(this.heap[right], this.heap[smallest])) {
        smallest = right;
      }
      if (smallest === index) {
        break;
      }
      [this.heap[index], this.heap[smallest]] = [
        this.heap[smallest],
        this.heap[index],
      ];
      index = smallest;
    }
  }
}

// ---------------------------------------------------------------------------------------------
// src/interactive-metrics.ts
// ---------------------------------------------------------------------------------------------
class SlidingWindowMetrics {
  constructor(windowMs = 10_000) {
    this.windowMs = windowMs;
    this.samples = [];
  }

  addSample(latencyMs) {
    const now = Date.now();
    this.samples.push({ ts: now, latencyMs });
    this.trim(now);
  }

  snapshot() {
    const now = Date.now();
    this.trim(now);
    if (this.samples.length === 0) {
      return { rps: 0, p95LatencyMs: 0, sampleCount: 0 };
    }
    const rps = (this.samples.length / this.windowMs) * 1000;
    const latencies = this.samples
      .map((s) => s.latencyMs)
      .sort((a, b) => a - b);
    const p95Index = Math.min(
      latencies.length - 1,
      Math.floor(latencies.length * 0.95)
    );
    return {
      rps,
      p95LatencyMs: latencies[p95Index],
      sampleCount: this.samples.length,
    };
  }

  trim(now) {
    while (
      this.samples.length > 0 &&
      now - this.samples[0].ts > this.windowMs
    ) {
      this.samples.shift();
    }
  }
}

// ---------------------------------------------------------------------------------------------
// src/scheduler.ts
// ---------------------------------------------------------------------------------------------
class LmTrafficScheduler {
  constructor(options) {
    this.options = options;
    this.interactiveQueue = new PriorityQueue(options.tieBreak); // ADDITION (b): tieBreak argument
    this.batchQueue = new PriorityQueue(options.tieBreak); // ADDITION (b): tieBreak argument
    this.metrics = new SlidingWindowMetrics(options.windowMs ?? 10_000);
    this.running = 0;
    this.batchRunning = 0;
    this.smoothed = 0; // ADDITION (a): section 8.3's `let smoothedPressure = 0`
  }

  submit(type, id, execute) {
    return new Promise((resolve, reject) => {
      const task = {
        id,
        type,
        execute,
        resolve,
        reject,
        submittedAt: Date.now(),
      };
      const queue =
        type === 'interactive' ? this.interactiveQueue : this.batchQueue;
      queue.push({
        id,
        priority: type === 'interactive' ? 0 : 10,
        value: task,
        enqueuedAt: task.submittedAt,
      });
      this.drain();
    });
  }

  get allowedBatchConcurrency() {
    const { rps, p95LatencyMs } = this.metrics.snapshot();
    const rpsPressure = Math.min(
      1,
      rps / this.options.interactiveRpsThreshold
    );
    const latencyPressure = Math.min(
      1,
      p95LatencyMs / this.options.interactiveP95LatencyMs
    );
    let pressure = Math.max(rpsPressure, latencyPressure);
    // ADDITION (a): section 8.3, "每次计算 allowedBatchConcurrency 时先对压力做平滑再计算并发数".
    const alpha = this.options.smoothingAlpha;
    if (alpha !== undefined && alpha !== null) {
      this.smoothed = alpha * pressure + (1 - alpha) * this.smoothed;
      pressure = this.smoothed;
    }
    const range =
      this.options.batchMaxConcurrency - this.options.batchMinConcurrency;
    return Math.max(
      this.options.batchMinConcurrency,
      Math.round(this.options.batchMaxConcurrency - range * pressure)
    );
  }

  drain() {
    while (this.running < this.options.maxConcurrency) {
      const interactiveTask = this.interactiveQueue.pop();
      if (interactiveTask) {
        this.execute(interactiveTask.value);
        continue;
      }
      const batchLimit = this.allowedBatchConcurrency;
      if (this.batchRunning >= batchLimit) {
        break;
      }
      const batchTask = this.batchQueue.pop();
      if (batchTask) {
        this.execute(batchTask.value);
      } else {
        break;
      }
    }
  }

  execute(task) {
    this.running++;
    if (task.type === 'batch') {
      this.batchRunning++;
    }
    Promise.resolve()
      .then(() => task.execute())
      .then((value) => task.resolve(value))
      .catch((reason) => task.reject(reason))
      .finally(() => {
        this.running--;
        if (task.type === 'batch') {
          this.batchRunning--;
        } else {
          this.metrics.addSample(Date.now() - task.submittedAt);
        }
        this.drain();
      });
  }
}

module.exports = { PriorityQueue, SlidingWindowMetrics, LmTrafficScheduler };
