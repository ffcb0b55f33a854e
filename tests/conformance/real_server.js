#!/usr/bin/env node
'use strict';
// The article's own scheduler (article_scheduler.js, unchanged) in front of a real OpenAI-compatible server,
// with real time (Date.now) and real fetch calls: the export loop of `simlab validate-real --node-policies`.
//
//   node real_server.js URL OPTIONS.json TASKS.csv OUT.csv MAX_SECONDS
//
// URL: the canonical URL simlab checked and resolved (http://LOOPBACK-ADDRESS:PORT[/path]); checked again here
// (checkUrl): an IP literal that is loopback, an explicit port 1-65535, no credentials, and exactly the form the
// WHATWG parser gives back, so no two parsers can disagree on the host. Redirects are refused.
// OPTIONS.json: the options file simlab exported (camelCase SchedulerOptions; "policy": "unscheduled" is the
// article's Promise.all arm: every request is sent on arrival). TASKS.csv: id,kind,arrival_ms,prompt_tokens,
// output_tokens (written by simlab). Each task is submitted at its arrival time (setTimeout from a common
// origin); its execute() streams one completion (prompt as token ids, ignore_eos, exactly output_tokens tokens).
// OUT.csv: id,kind,prompt_tokens,output_tokens,arrival_ms,start_ms,ttft_ms,end_ms,outcome (ms from the origin;
// ttft and end measured from arrival's origin like simlab's records). Requests still open after MAX_SECONDS are
// aborted (outcome "cancelled"); GET /v1/models waits at most 10 s; a JSON answer is read up to 1 MiB and an
// event-stream line up to 64 KiB. Every request has a connection of its own (Connection: close), as in simlab's
// own driver: a kept-alive idle connection can meet the server's keep-alive timeout (uvicorn's 5 s under vLLM)
// just as a request is written on it, and the request fails with "other side closed".
// Exit codes: 0 done; 2 the URL or the arguments refused; 3 the server's answer broke the protocol (malformed
// JSON, an unexpected status, more tokens than asked, too large, too slow), its message on stderr.
const fs = require('fs');
const net = require('net');
const { LmTrafficScheduler } = require('./article_scheduler.js');

const MODEL_MS = 10000;
const JSON_BYTES = 1 << 20;
const LINE_BYTES = 64 * 1024;

function refuse(message) {
  console.error(message);
  process.exit(2);
}

class ServerError extends Error {}

function checkUrl(raw) {
  if (typeof raw !== 'string' || /[\\@%\s\x00-\x1f\x7f]/.test(raw)) refuse(`refusing URL ${JSON.stringify(raw)}: backslash, '@', '%', whitespace or control character`);
  let u;
  try { u = new URL(raw); } catch (e) { refuse(`refusing URL ${JSON.stringify(raw)}: not a URL`); }
  if (u.protocol !== 'http:' || u.username || u.password || u.search || u.hash) {
    refuse(`refusing URL ${JSON.stringify(raw)}: only http://ADDRESS:PORT[/path], no credentials, query or fragment`);
  }
  const bare = u.hostname.startsWith('[') ? u.hostname.slice(1, -1) : u.hostname;
  const kind = net.isIP(bare);
  const loopback = (kind === 4 && bare.split('.')[0] === '127') || (kind === 6 && bare === '::1');
  if (!loopback) refuse(`refusing to send load to ${u.hostname}: only a loopback IP address literal (127.0.0.0/8, [::1])`);
  const port = u.port === '' ? 80 : Number(u.port);
  if (!(Number.isInteger(port) && port >= 1 && port <= 65535)) refuse(`refusing URL ${JSON.stringify(raw)}: the port must be 1-65535`);
  const path = u.pathname === '/' ? '' : u.pathname;
  const canonical = `http://${u.hostname}:${port}${path}`;
  if (canonical !== raw) refuse(`refusing URL ${JSON.stringify(raw)}: not in canonical form (${canonical})`);
  return canonical;
}

const [rawUrl, optionsFile, tasksFile, outFile, maxSecondsArg] = process.argv.slice(2);
if (!outFile) refuse('usage: node real_server.js URL OPTIONS.json TASKS.csv OUT.csv [MAX_SECONDS]');
const url = checkUrl(rawUrl);
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
if (!(maxSeconds > 0 && Number.isFinite(maxSeconds))) refuse(`MAX_SECONDS must be a positive number (found ${maxSecondsArg})`);
const controller = new AbortController();

function fail(what, message) {
  return new ServerError(`server ${url}: response to ${what}: ${message}`);
}

async function readCapped(res, cap, what) {
  const parts = [];
  let size = 0;
  for await (const chunk of res.body) {
    size += chunk.length;
    if (size > cap) throw fail(what, `a body larger than ${cap} bytes`);
    parts.push(Buffer.from(chunk));
  }
  return Buffer.concat(parts).toString('utf8');
}

async function modelName() {
  const what = `GET ${new URL(url).pathname.replace(/\/$/, '')}/v1/models`;
  const signal = AbortSignal.any([controller.signal, AbortSignal.timeout(Math.min(MODEL_MS, maxSeconds * 1000))]);
  let text;
  try {
    const res = await fetch(`${url}/v1/models`, { signal, redirect: 'error', headers: { Connection: 'close' } });
    text = await readCapped(res, JSON_BYTES, what);
    if (res.status !== 200) throw fail(what, `HTTP ${res.status} (expected 200): ${text.slice(0, 200)}`);
  } catch (e) {
    if (e instanceof ServerError) throw e;
    throw fail(what, signal.aborted ? 'no answer in time' : String(e.cause || e));
  }
  let data;
  try { data = JSON.parse(text); } catch (e) { throw fail(what, `not JSON: ${text.slice(0, 200)}`); }
  const first = data && Array.isArray(data.data) && data.data[0];
  if (!first || typeof first.id !== 'string' || !first.id) throw fail(what, `expected {"data": [{"id": MODEL}]}: ${text.slice(0, 200)}`);
  return first.id;
}

async function complete(model, prompt, output, rec, t0) {
  const body = JSON.stringify({
    model, prompt: Array.from({ length: prompt }, (_, i) => 100 + (i % 1000)), max_tokens: output,
    min_tokens: output, ignore_eos: true, temperature: 0, stream: true,
    stream_options: { include_usage: true, continuous_usage_stats: true },
  });
  const what = `POST ${new URL(url).pathname.replace(/\/$/, '')}/v1/completions`;
  const res = await fetch(`${url}/v1/completions`, {
    method: 'POST', headers: { 'Content-Type': 'application/json', Connection: 'close' }, body, signal: controller.signal, redirect: 'error',
  });
  if (res.status !== 200) throw fail(what, `HTTP ${res.status} (expected 200): ${(await readCapped(res, 4096, what).catch(() => '')).slice(0, 200)}`);
  const decoder = new TextDecoder();
  let buf = '';
  let tokens = 0;
  for await (const chunk of res.body) {
    const now = Date.now();
    buf += decoder.decode(chunk, { stream: true });
    let cut;
    while ((cut = buf.indexOf('\n')) >= 0) {
      const line = buf.slice(0, cut);
      buf = buf.slice(cut + 1);
      if (line.length > LINE_BYTES) throw fail(what, `an event-stream line longer than ${LINE_BYTES} bytes`);
      if (!line.startsWith('data:')) continue;
      const payload = line.slice(5).trim();
      if (payload === '[DONE]') continue;
      let msg;
      try { msg = JSON.parse(payload); } catch (e) { throw fail(what, `malformed event-stream JSON: ${payload.slice(0, 200)}`); }
      if (!msg || typeof msg !== 'object') throw fail(what, `an event that is not a JSON object: ${payload.slice(0, 200)}`);
      if (msg.error) throw fail(what, `the server reported an error: ${JSON.stringify(msg.error).slice(0, 200)}`);
      const n = msg.usage && msg.usage.completion_tokens;
      if (n !== undefined && n !== null && !(Number.isInteger(n) && n >= 0)) throw fail(what, `usage.completion_tokens is ${JSON.stringify(n)}`);
      if (n > output) throw fail(what, `asked for ${output} tokens, the server reports ${n}`);
      if (msg.choices && msg.choices.length && n > tokens) {
        if (rec.ttft_ms === '') rec.ttft_ms = now - t0 - rec.arrival_ms;
        tokens = n;
      }
    }
    if (buf.length > LINE_BYTES) throw fail(what, `an event-stream line longer than ${LINE_BYTES} bytes`);
  }
  if (tokens !== output) throw fail(what, `asked for ${output} tokens, the server sent ${tokens}`);
}

let fatal = null;

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
        if (controller.signal.aborted) {
          rec.outcome = 'cancelled';
          return;
        }
        // A request the server fails stops the run, as in simlab's own driver: a broken server measures nothing.
        rec.outcome = 'error';
        fatal = fatal || (e instanceof ServerError ? e : fail('POST /v1/completions', String(e.cause || e)));
        controller.abort();
      }).finally(() => { rec.end_ms = Date.now() - t0; resolve(); });
    }, Math.max(0, t0 + t.arrival - Date.now()));
  }));
  const limit = setTimeout(() => controller.abort(), maxSeconds * 1000);
  // Tasks still queued in the article's scheduler at the limit never start: stop waiting for them.
  const gaveUp = new Promise((resolve) => controller.signal.addEventListener('abort', () => setTimeout(resolve, 2000)));
  await Promise.race([Promise.all(pending), gaveUp]);
  clearTimeout(limit);
  if (fatal) throw fatal;
  const cols = ['id', 'kind', 'prompt_tokens', 'output_tokens', 'arrival_ms', 'start_ms', 'ttft_ms', 'end_ms', 'outcome'];
  fs.writeFileSync(outFile, [cols.join(','), ...records.map((r) => cols.map((c) => r[c]).join(','))].join('\n') + '\n');
  const ok = records.filter((r) => r.outcome === 'ok').length;
  console.log(`${ok}/${records.length} completed`);
  process.exit(0);
}

main().catch((e) => {
  if (e instanceof ServerError) {
    console.error(e.message);
    process.exit(3);
  }
  console.error(e);
  process.exit(1);
});
