#!/usr/bin/env node
'use strict';
// The article's own scheduler (article_scheduler.js, unchanged) in front of a real OpenAI-compatible server,
// with real time (Date.now) and real fetch calls: the export loop of `simlab validate-real --node-policies`.
//
//   node real_server.js URL OPTIONS.json TASKS.csv OUT.csv MAX_SECONDS
//
// OPTIONS.json: the options file simlab exported (camelCase SchedulerOptions; "policy": "unscheduled" is the
// article's Promise.all arm: every request is sent on arrival). TASKS.csv: id,kind,arrival_ms,prompt_tokens,
// output_tokens (written by simlab). Each task is submitted at its arrival time (setTimeout from a common
// origin); its execute() streams one completion (prompt as token ids, ignore_eos, exactly output_tokens tokens).
// OUT.csv: id,kind,prompt_tokens,output_tokens,arrival_ms,start_ms,ttft_ms,end_ms,outcome (ms from the origin;
// ttft and end measured from arrival's origin like simlab's records). Requests still open after MAX_SECONDS are
// aborted (outcome "cancelled").
const fs = require('fs');
const { LmTrafficScheduler } = require('./article_scheduler.js');

const [url, optionsFile, tasksFile, outFile, maxSecondsArg] = process.argv.slice(2);
if (!outFile) {
  console.error('usage: node real_server.js URL OPTIONS.json TASKS.csv OUT.csv [MAX_SECONDS]');
  process.exit(2);
}
const host = new URL(url).hostname;
if (!(host === 'localhost' || host === '::1' || host === '[::1]' || /^127\./.test(host))) {
  console.error(`refusing to send load to ${host}: loopback only`);
  process.exit(2);
}
const options = JSON.parse(fs.readFileSync(optionsFile, 'utf8'));
const lines = fs.readFileSync(tasksFile, 'utf8').trim().split(/\r?\n/);
const header = lines[0].split(',');
const tasks = lines.slice(1).map((line) => {
  const cells = line.split(',');
  const row = Object.fromEntries(header.map((h, i) => [h, cells[i]]));
  return { id: row.id, kind: row.kind, arrival: Number(row.arrival_ms), prompt: Number(row.prompt_tokens),
           output: Number(row.output_tokens) };
});
const maxSeconds = Number(maxSecondsArg || 900);
const controller = new AbortController();

async function modelName() {
  const res = await fetch(`${url}/v1/models`);
  return (await res.json()).data[0].id;
}

async function complete(model, prompt, output, rec, t0) {
  const body = JSON.stringify({
    model, prompt: Array.from({ length: prompt }, (_, i) => 100 + (i % 1000)), max_tokens: output,
    min_tokens: output, ignore_eos: true, temperature: 0, stream: true,
    stream_options: { include_usage: true, continuous_usage_stats: true },
  });
  const res = await fetch(`${url}/v1/completions`, {
    method: 'POST', headers: { 'Content-Type': 'application/json' }, body, signal: controller.signal,
  });
  if (res.status !== 200) throw new Error(`HTTP ${res.status}: ${(await res.text()).slice(0, 200)}`);
  const decoder = new TextDecoder();
  let buf = '';
  let tokens = 0;
  for await (const chunk of res.body) {
    const now = Date.now();
    buf += decoder.decode(chunk, { stream: true });
    let cut;
    while ((cut = buf.indexOf('\n\n')) >= 0) {
      const event = buf.slice(0, cut);
      buf = buf.slice(cut + 2);
      for (const line of event.split('\n')) {
        if (!line.startsWith('data:')) continue;
        const payload = line.slice(5).trim();
        if (payload === '[DONE]') continue;
        const msg = JSON.parse(payload);
        const n = msg.usage && msg.usage.completion_tokens;
        if (msg.choices && msg.choices.length && n > tokens) {
          if (rec.ttft_ms === '') rec.ttft_ms = now - t0 - rec.arrival_ms;
          tokens = n;
        }
      }
    }
  }
  if (tokens !== output) throw new Error(`asked for ${output} tokens, got ${tokens}`);
}

async function main() {
  const model = await modelName();
  const scheduler = options.policy === 'unscheduled' ? null : new LmTrafficScheduler(options);
  const t0 = Date.now() + 300;
  const records = tasks.map((t) => ({ id: t.id, kind: t.kind, prompt_tokens: t.prompt, output_tokens: t.output,
                                      arrival_ms: '', start_ms: '', ttft_ms: '', end_ms: '', outcome: 'not sent' }));
  const pending = tasks.map((t, i) => new Promise((resolve) => {
    setTimeout(() => {
      const rec = records[i];
      rec.arrival_ms = Date.now() - t0;
      const execute = () => {
        rec.start_ms = Date.now() - t0;
        return complete(model, t.prompt, t.output, rec, t0);
      };
      const run = scheduler ? scheduler.submit(t.kind, t.id, execute) : execute();
      run.then(() => { rec.outcome = 'ok'; }, (e) => {
        rec.outcome = controller.signal.aborted ? 'cancelled' : `error: ${String(e).replace(/[,\n]/g, ' ').slice(0, 150)}`;
      }).finally(() => { rec.end_ms = Date.now() - t0; resolve(); });
    }, Math.max(0, t0 + t.arrival - Date.now()));
  }));
  const limit = setTimeout(() => controller.abort(), maxSeconds * 1000);
  // Tasks still queued in the article's scheduler at the limit never start: stop waiting for them.
  const gaveUp = new Promise((resolve) => controller.signal.addEventListener('abort', () => setTimeout(resolve, 2000)));
  await Promise.race([Promise.all(pending), gaveUp]);
  clearTimeout(limit);
  const cols = ['id', 'kind', 'prompt_tokens', 'output_tokens', 'arrival_ms', 'start_ms', 'ttft_ms', 'end_ms', 'outcome'];
  fs.writeFileSync(outFile, [cols.join(','), ...records.map((r) => cols.map((c) => r[c]).join(','))].join('\n') + '\n');
  const ok = records.filter((r) => r.outcome === 'ok').length;
  console.log(`${ok}/${records.length} completed`);
  process.exit(0);
}

main().catch((e) => { console.error(e); process.exit(1); });
