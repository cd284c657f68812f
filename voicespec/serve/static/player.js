// Browser client for `voicespec serve` (protocol v1.1, see /protocol; v1 servers work too, without
// the voice list, speed and word timestamps): a WebSocket session, an AudioWorklet player
// (worklet.js), a recording of what arrived (waveform, WAV download) and the page's controls.
// Exposes window.voicespec (the page's state) and #result (a JSON summary) for tests.

const HEADER_BYTES = 12;
const RATES = [8000, 16000, 22050, 24000, 44100, 48000];
const SPEED_RANGE = [0.5, 2];

// One binary audio frame -> {contextId, seq, samples: Float32Array} (see PROTOCOL.md).
export function decodeFrame(buf, encoding) {
  const v = new DataView(buf);
  if (v.getUint8(0) !== 0x56 || v.getUint8(1) !== 0x53 || v.getUint8(2) !== 1) throw new Error("not a v1 audio frame");
  const cidLen = v.getUint8(3);
  const seq = v.getUint32(4, true);
  const n = v.getUint32(8, true);
  const contextId = new TextDecoder().decode(new Uint8Array(buf, HEADER_BYTES, cidLen));
  const offset = HEADER_BYTES + cidLen + ((4 - (cidLen % 4)) % 4);
  let samples;
  if (encoding === "f32le") {
    samples = new Float32Array(buf.slice(offset, offset + 4 * n));
  } else {
    const ints = new Int16Array(buf, offset, n);
    samples = new Float32Array(n);
    for (let i = 0; i < n; i++) samples[i] = ints[i] / 32767;
  }
  return { contextId, seq, samples };
}

function base64ToBuffer(b64) {
  const bin = atob(b64);
  const bytes = new Uint8Array(bin.length);
  for (let i = 0; i < bin.length; i++) bytes[i] = bin.charCodeAt(i);
  return bytes.buffer;
}

// Float samples in [-1, 1] -> a mono 16-bit PCM WAV Blob (the inverse of pcm_s16le's decoding:
// round(clip(x, -1, 1) * 32767), so received s16 audio comes back bit for bit).
export function encodeWav(samples, sampleRate) {
  const n = samples.length;
  const buf = new ArrayBuffer(44 + 2 * n);
  const v = new DataView(buf);
  const tag = (at, s) => { for (let i = 0; i < s.length; i++) v.setUint8(at + i, s.charCodeAt(i)); };
  tag(0, "RIFF"); v.setUint32(4, 36 + 2 * n, true); tag(8, "WAVE");
  tag(12, "fmt "); v.setUint32(16, 16, true); v.setUint16(20, 1, true); v.setUint16(22, 1, true);
  v.setUint32(24, sampleRate, true); v.setUint32(28, 2 * sampleRate, true); v.setUint16(32, 2, true); v.setUint16(34, 16, true);
  tag(36, "data"); v.setUint32(40, 2 * n, true);
  for (let i = 0; i < n; i++) v.setInt16(44 + 2 * i, Math.round(Math.max(-1, Math.min(1, samples[i])) * 32767), true);
  return new Blob([buf], { type: "audio/wav" });
}

// The audio of one utterance as it arrives: the samples (for the download) and min/max peaks per
// block of `block` samples (for drawing the waveform without walking every sample each frame).
export class Recording {
  constructor(sampleRate) {
    this.sampleRate = sampleRate;
    this.block = Math.max(1, Math.round(sampleRate / 500)); // 2 ms
    this.chunks = [];
    this.length = 0;
    this.mins = [];
    this.maxs = [];
  }

  add(samples) {
    this.chunks.push(samples);
    const { block, mins, maxs } = this;
    for (let i = 0; i < samples.length; i++) {
      const b = Math.floor((this.length + i) / block);
      const x = samples[i];
      if (b >= mins.length) { mins.push(x); maxs.push(x); } else {
        if (x < mins[b]) mins[b] = x;
        if (x > maxs[b]) maxs[b] = x;
      }
    }
    this.length += samples.length;
  }

  samples(n = this.length) { // the first n samples, as one array
    const out = new Float32Array(Math.min(n, this.length));
    let at = 0;
    for (const c of this.chunks) {
      if (at >= out.length) break;
      const take = Math.min(c.length, out.length - at);
      out.set(take === c.length ? c : c.subarray(0, take), at);
      at += take;
    }
    return out;
  }
}

// The index of the word being spoken at time t (seconds), or -1 (before the first, or in a pause).
export function wordAt(words, t) {
  let lo = 0, hi = words.length - 1, found = -1;
  while (lo <= hi) { // the last word with start_s <= t
    const mid = (lo + hi) >> 1;
    if (words[mid].start_s <= t) { found = mid; lo = mid + 1; } else hi = mid - 1;
  }
  return found >= 0 && t < words[found].end_s ? found : -1;
}

export class Player {
  constructor(sampleRate, prebufferMs, onLevel) {
    this.sampleRate = sampleRate;
    this.prebuffer = Math.round((prebufferMs / 1000) * sampleRate);
    this.onLevel = onLevel;
    this.gen = 0; // reports from before the last reset are stale
  }

  async init() {
    this.ctx = new AudioContext({ sampleRate: this.sampleRate, latencyHint: "interactive" });
    await this.ctx.audioWorklet.addModule(new URL("worklet.js", import.meta.url));
    this.node = new AudioWorkletNode(this.ctx, "pcm-player", {
      numberOfInputs: 0, outputChannelCount: [1], processorOptions: { prebuffer: this.prebuffer },
    });
    this.node.port.onmessage = (e) => { if (e.data.gen === this.gen) this.onLevel(e.data); };
    this.node.connect(this.ctx.destination);
    await this.ctx.resume();
  }

  push(samples) { this.node.port.postMessage(samples, [samples.buffer]); }
  end() { this.node.port.postMessage({ type: "end" }); }
  reset() { this.node.port.postMessage({ type: "reset", gen: ++this.gen }); }
  async close() { if (this.ctx) await this.ctx.close(); }
}

// An error to show: {code, message}, from the server, the socket or this page.
export class PlayerError extends Error {
  constructor(code, message, extra = {}) {
    super(message);
    this.code = code;
    Object.assign(this, extra);
  }
}

const CLOSE_MEANINGS = {
  1000: "closed normally", 1001: "the server is shutting down", 1006: "the connection failed or was cut " +
  "(wrong or missing API key, server down, or network)", 1009: "a message was too big",
  1011: "server error", 1013: "the server is full; try again later", 4000: "the page stopped reading",
  4001: "idle too long", 4002: "over the server's rate limit",
};

export function closeMessage(code, reason) {
  const meaning = CLOSE_MEANINGS[code] || "closed";
  return `connection closed (${code}${reason ? `, ${reason}` : ""}): ${meaning}`;
}

export class Session {
  // Opens the socket and sends `start`; `handlers` get audio, timestamps, done, cancelled,
  // flushed, error and close.
  constructor(url, options, handlers) {
    this.url = url;
    this.options = options;
    this.handlers = handlers;
    this.nextSeq = {};
    this.closed = false;
    this.closedByUs = false;
  }

  open() {
    return new Promise((resolve, reject) => {
      const ws = (this.ws = new WebSocket(this.url));
      ws.binaryType = "arraybuffer";
      ws.onopen = () => ws.send(JSON.stringify({ type: "start", ...this.options }));
      ws.onclose = (e) => {
        this.closed = true;
        reject(new PlayerError("closed", closeMessage(e.code, e.reason), { closeCode: e.code }));
        (this.handlers.close || (() => {}))(e, this);
      };
      ws.onmessage = (e) => {
        if (typeof e.data !== "string") return this.audio(decodeFrame(e.data, this.ready.encoding));
        const m = JSON.parse(e.data);
        if (m.type === "ready") { this.ready = m; resolve(m); }
        else if (m.type === "audio") this.audio(decodeFrame(this.frameFromJson(m), this.ready.encoding));
        else if (m.type === "error" && !this.ready) { // a rejected start: not fatal, but this socket is done
          reject(new PlayerError(m.code, m.message, { server: m }));
          this.close();
        } else (this.handlers[m.type] || (() => {}))(m);
      };
    });
  }

  frameFromJson(m) { // rebuild a binary frame so both transports share one decoder
    const payload = new Uint8Array(base64ToBuffer(m.data));
    const cid = new TextEncoder().encode(m.context_id);
    const off = HEADER_BYTES + cid.length + ((4 - (cid.length % 4)) % 4);
    const buf = new ArrayBuffer(off + payload.length);
    const v = new DataView(buf);
    v.setUint8(0, 0x56); v.setUint8(1, 0x53); v.setUint8(2, 1); v.setUint8(3, cid.length);
    v.setUint32(4, m.seq, true); v.setUint32(8, m.samples, true);
    new Uint8Array(buf).set(cid, HEADER_BYTES);
    new Uint8Array(buf).set(payload, off);
    return buf;
  }

  audio(frame) {
    const want = this.nextSeq[frame.contextId] || 0;
    if (frame.seq !== want) {
      this.handlers.error({ code: "client", message: `audio seq ${frame.seq}, expected ${want}`, context_id: frame.contextId });
    }
    this.nextSeq[frame.contextId] = frame.seq + 1;
    this.handlers.audio(frame);
  }

  send(type, fields) { if (!this.closed) this.ws.send(JSON.stringify({ type, ...fields })); }
  newContext(cid) { delete this.nextSeq[cid]; }
  close() { this.closedByUs = true; if (this.ws) this.ws.close(); }
}

// ---------------------------------------------------------------------------- the page

const $ = (id) => document.getElementById(id);
const state = {
  protocol: null, voices: [], defaultVoice: null, voicesLoaded: null,
  session: null, sessionKey: null, player: null, ready: null,
  contextId: null, n: 0, t0: 0, ttfa: null, samples: 0, done: null, drained: false, cancelled: false, stoppedAt: null,
  level: {}, errors: [], words: [], phonemes: [], rec: null, download: null, busy: false,
};
if (typeof window !== "undefined") window.voicespec = state;

function show(id, text) { $(id).textContent = text; }
function log(text) { $("log").textContent = `${new Date().toLocaleTimeString()} ${text}\n` + $("log").textContent; }
function status(text) { show("status", text); }

function publish() { // machine-readable outcome (headless tests read #result)
  const err = $("error");
  $("result").textContent = JSON.stringify({
    protocol: state.protocol, voices: state.voices, context_id: state.contextId, ready: state.ready,
    ttfa_ms: state.ttfa, samples: state.samples, done: state.done, played: state.level.played || 0,
    underruns: state.level.underruns || 0, drained: !!state.drained, cancelled: state.cancelled, errors: state.errors,
    words: state.words, phonemes: state.phonemes, sample_rate: state.rec ? state.rec.sampleRate : null,
    download: state.download && { url: state.download.url, bytes: state.download.bytes, samples: state.download.samples,
                                  name: state.download.name },
    figures_error: err.hidden ? null : err.textContent,
  });
}

// -- errors, shown where the figures are

function fail(e) {
  if (e && typeof e === "object") { if (e.reported) return; e.reported = true; } // one failure, shown once
  state.busy = false;
  state.failed = true;
  const m = e instanceof PlayerError ? { code: e.code, message: e.message, ...(e.server || {}) }
    : e && e.code && e.message ? { ...e, reported: undefined } : { code: "client", message: String(e && e.message ? e.message : e) };
  state.errors.push(m);
  log(`error ${m.code}: ${m.message}`);
  const box = $("error");
  if (box.hidden) box.textContent = "";
  const head = document.createElement("strong");
  head.textContent = box.childElementCount ? "then:" : "Something went wrong";
  const line = document.createElement("div");
  const code = document.createElement("code");
  code.textContent = m.code;
  line.append(code, ` — ${m.message}`);
  if (!box.childElementCount) box.append(head);
  box.append(line);
  box.hidden = false;
  $("figures-table").hidden = true;
  $("figures-note").hidden = true;
  status("error");
  publish();
}

function clearError() {
  $("error").hidden = true;
  $("error").textContent = "";
  $("figures-table").hidden = false;
}

// -- the voice list

function apiUrl(path) {
  const url = new URL(path, location.href);
  const key = $("key").value.trim();
  if (key) url.searchParams.set("api_key", key);
  if (url.protocol === "http:" || url.protocol === "https:") {
    if (path.startsWith("v1/stream")) url.protocol = url.protocol === "https:" ? "wss:" : "ws:";
  }
  return url.href;
}

async function fetchVoices() {
  let res;
  try {
    res = await fetch(apiUrl("v1/voices"), { cache: "no-store" });
  } catch (e) {
    throw new PlayerError("network", `could not reach the server for the voice list (${e.message})`);
  }
  if (res.status === 404) return probeVoices(); // a protocol 1 server: no voice list
  if (!res.ok) {
    const body = await res.json().catch(() => ({}));
    const hint = res.status === 401 ? " (enter the API key under “Playback and connection”)" : "";
    throw new PlayerError(body.error || `http_${res.status}`, `${body.message || res.statusText}${hint}`);
  }
  const info = await res.json();
  return { protocol: "1.1", default: info.default, voices: info.voices };
}

// Protocol 1 has no voice list: ask a throwaway session what its voice and drafters are.
async function probeVoices() {
  const s = new Session(apiUrl("v1/stream"), {}, { close: () => {} });
  const r = await s.open();
  s.close();
  return { protocol: String(r.protocol_version || r.protocol), default: r.voice,
           voices: [{ name: r.voice, sample_rate: r.sample_rate, drafters: r.drafters, default_drafter: r.drafter,
                      speed: false }] };
}

function voiceInfo() {
  const name = $("voice").value;
  return state.voices.find((v) => v.name === name) || null;
}

function loadVoices() {
  status("loading voices…");
  state.voicesLoaded = fetchVoices().then((info) => {
    state.protocol = info.protocol;
    state.voices = info.voices;
    state.defaultVoice = info.default;
    const sel = $("voice");
    const keep = sel.value;
    sel.replaceChildren(...info.voices.map((v) => new Option(v.name, v.name)));
    sel.value = info.voices.some((v) => v.name === keep) ? keep : info.default;
    fillVoiceControls();
    log(`protocol ${info.protocol}; voices: ${info.voices.map((v) => v.name).join(", ")}`);
    if (state.loadFailed && !state.contextId) { // the error shown was the list's: it is fixed now
      state.errors = [];
      clearError();
    }
    state.loadFailed = false;
    status("ready");
    publish();
    return info;
  });
  state.voicesLoaded.catch((e) => { state.voicesLoaded = null; state.loadFailed = true; fail(e); });
  return state.voicesLoaded;
}

const DRAFTER_NOTES = { none: "no drafting: the model decodes every step", ngram: "drafts by repeating the voice's own output",
                        auto: "the server picks a drafter", feature: "EAGLE-style draft heads on the model's features",
                        medusa: "Medusa heads", distilled: "a small distilled draft model" };

function fillVoiceControls() {
  const v = voiceInfo();
  const sel = $("drafter");
  const keep = sel.value;
  const names = v ? v.drafters : [];
  sel.replaceChildren(...names.map((d) => {
    const o = new Option(d + (v && d === v.default_drafter ? " (default)" : ""), d);
    o.title = DRAFTER_NOTES[d] || (d.startsWith("early-exit") ? "the model's own first layers" : "a draft model shipped with the voice");
    return o;
  }));
  if (!v) sel.append(new Option("server's default", "")); // a voice the list lacks: the server judges it
  sel.value = names.includes(keep) && state.drafterChosen ? keep : (v ? v.default_drafter : "");
  const speed = $("speed");
  speed.disabled = !(v && v.speed);
  speed.title = speed.disabled ? (state.protocol === "1.1" ? "this voice cannot change its speed (no duration predictor)"
    : "this server does not support speed (protocol 1)") : "";
  if (speed.disabled) { speed.value = "1"; showSpeed(); }
  const rate = $("rate").options[0];
  rate.textContent = v ? `voice's rate (${v.sample_rate} Hz)` : "voice's rate";
}

function showSpeed() { show("speed-out", `${Number($("speed").value).toFixed(2)}×`); }

// -- the request

function startOptions() {
  const v = voiceInfo();
  const rate = parseInt($("rate").value, 10) || (v && v.sample_rate) || 24000;
  const o = { sample_rate: rate, encoding: "pcm_s16le" };
  if ($("voice").value) o.voice = $("voice").value;
  if ($("drafter").value) o.drafter = $("drafter").value;
  const gamma = $("gamma").value.trim();
  if (gamma === "auto") o.gamma = "auto";
  else if (/^\d+$/.test(gamma)) o.gamma = parseInt(gamma, 10);
  else if (gamma) throw new PlayerError("client", `γ must be "auto" or a whole number, not ${JSON.stringify(gamma)}`);
  const seed = $("seed").value.trim();
  if (/^\d+$/.test(seed)) o.seed = Number(seed);
  else if (seed) throw new PlayerError("client", `the seed must be a whole number (empty: random), not ${JSON.stringify(seed)}`);
  const temp = $("temperature").value.trim();
  if (temp && Number.isFinite(Number(temp))) o.temperature = Number(temp);
  else if (temp) throw new PlayerError("client", `the temperature must be a number (empty: the voice's), not ${JSON.stringify(temp)}`);
  const budget = parseFloat($("budget").value);
  if (budget > 0) o.latency_budget_ms = budget;
  if (state.protocol === "1.1" && v) { // a voice times its words and changes speed by its duration predictor
    if (v.timestamps !== false) o.word_timestamps = true;
    if (v.speed) o.speed = Math.min(SPEED_RANGE[1], Math.max(SPEED_RANGE[0], Number($("speed").value)));
  }
  return o;
}

function handlers() {
  return {
    audio: (f) => {
      if (f.contextId !== state.contextId || state.cancelled) return;
      if (state.ttfa === null) { state.ttfa = Math.round(performance.now() - state.t0); show("ttfa", `${state.ttfa} ms`); }
      state.samples += f.samples.length;
      state.rec.add(f.samples.slice()); // the worklet gets (and detaches) the original
      state.player.push(f.samples);
      if (state.busy) status("playing…");
      kick();
    },
    timestamps: (m) => {
      if (m.context_id !== state.contextId || state.cancelled) return;
      state.words.push(...(m.words || []));
      if (m.phonemes) state.phonemes.push(...m.phonemes);
      renderWords(m.words || []);
      publish();
    },
    done: (m) => {
      if (m.context_id !== state.contextId || state.cancelled) return;
      state.done = m.stats;
      state.player.end();
      if (state.ready) showRequest(state.ready);
      showFigures(m.stats);
      log(`done: ${m.stats.audio_s.toFixed(2)} s of audio, ${m.stats.steps} steps, gamma ${m.stats.gamma}`);
      publish();
    },
    cancelled: (m) => { log(`cancelled ${m.context_id}`); publish(); },
    flushed: () => {},
    error: (m) => {
      if (m.context_id && m.context_id !== state.contextId) { log(`error ${m.code} (${m.context_id}): ${m.message}`); return; }
      // The page sends each utterance whole: any error about it (or the session) ends it.
      if (state.player) state.player.end();
      fail(m);
    },
    close: (e, s) => {
      if (state.session === s) { state.session = null; state.sessionKey = null; }
      if (s.closedByUs) return;
      const text = closeMessage(e.code, e.reason);
      const inFlight = s.ready && state.busy && !state.done && !state.cancelled;
      const fatal = state.errors.length && state.errors[state.errors.length - 1].fatal;
      if (inFlight || fatal) { state.busy = false; fail(new PlayerError("closed", text, { closeCode: e.code })); }
      else log(text);
    },
  };
}

async function connect(options) {
  const s = new Session(apiUrl("v1/stream"), options, handlers());
  const ready = await s.open();
  state.ready = ready;
  if (ready.sampling && ready.sampling.temperature !== undefined) $("temperature").placeholder = `voice's (${ready.sampling.temperature})`;
  log(`ready: protocol ${ready.protocol_version || ready.protocol}, voice ${ready.voice}, ${ready.sample_rate} Hz, ` +
      `drafter ${ready.drafter}, gamma ${ready.gamma}` + (ready.speed !== undefined ? `, speed ${ready.speed}` : ""));
  return s;
}

async function ensurePlayer(rate) {
  const prebuffer = parseFloat($("prebuffer").value) || 0;
  if (state.player && state.player.sampleRate === rate && state.player.prebufferMs === prebuffer) return;
  if (state.player) await state.player.close();
  state.player = new Player(rate, prebuffer, onLevel);
  state.player.prebufferMs = prebuffer;
  await state.player.init();
}

async function speak() {
  const cid = `utt-${++state.n}`;
  const mine = () => state.pending === cid; // a later click took over
  state.pending = cid;
  // Barge-in: what was being said stops now, and nothing more of it is shown or played.
  if (state.session && state.contextId && state.busy && !state.cancelled) state.session.send("cancel", { context_id: state.contextId });
  if (state.player) state.player.reset();
  Object.assign(state, { contextId: null, busy: false, errors: [], failed: false, done: null, drained: false,
                         cancelled: false, ttfa: null, samples: 0, level: {}, words: [], phonemes: [], rec: null });
  setDownload(null);
  clearError();
  resetFigures("…");
  status("connecting…");
  publish(); // the outcome of this attempt, from now on
  try {
    if (!state.voicesLoaded) loadVoices();
    await state.voicesLoaded;
    const options = startOptions();
    const key = JSON.stringify(options) + "\n" + $("key").value;
    if (!state.session || state.session.closed || state.sessionKey !== key) {
      if (state.session) state.session.close();
      state.session = null;
      // The player first: an AudioContext is best made while the click still counts as a gesture.
      await ensurePlayer(options.sample_rate);
      const s = await connect(options);
      if (!mine()) { s.close(); return; }
      state.session = s;
      state.sessionKey = key;
    }
    await ensurePlayer(state.ready.sample_rate);
    if (!mine()) return;
    state.player.reset();
    Object.assign(state, { contextId: cid, t0: performance.now(), ttfa: null, samples: 0, done: null, drained: false,
                           cancelled: false, stoppedAt: null, level: {}, words: [], phonemes: [], busy: true, failed: false,
                           rec: new Recording(state.ready.sample_rate) });
    setDownload(null);
    renderWords(null);
    state.session.newContext(cid);
    state.session.send("text", { context_id: cid, text: $("text").value });
    state.session.send("end", { context_id: cid });
    status("synthesizing…");
    publish();
    kick();
  } catch (e) {
    if (mine()) { state.busy = false; fail(e); }
  }
}

function stop() {
  if (!state.contextId || state.cancelled) return;
  if (state.session && state.busy && !state.done) state.session.send("cancel", { context_id: state.contextId });
  if (state.drained) return;
  state.stoppedAt = playPosition();
  state.cancelled = true;
  state.busy = false;
  if (state.player) state.player.reset();
  finishRecording(Math.round(state.stoppedAt));
  status(`stopped at ${(state.stoppedAt / state.rec.sampleRate).toFixed(2)} s`);
  if (!state.done) resetFigures("–");
  publish();
  kick();
}

function onLevel(m) {
  state.level = m;
  state.levelAt = performance.now();
  $("meter").value = Math.min(1, m.rms * 4);
  show("level", m.rms > 0 ? `${(20 * Math.log10(m.rms)).toFixed(1)} dBFS` : "silence");
  if (state.busy) show("underruns", String(m.underruns));
  if (m.drained && !state.drained && state.contextId && !state.cancelled) {
    state.drained = true;
    state.busy = false;
    if (state.session) state.session.send("stats", { context_id: state.contextId, underruns: m.underruns, underrun_ms: m.underrunMs });
    show("underruns", m.underruns ? `${m.underruns} (${m.underrunMs.toFixed(0)} ms of silence)` : "0 — played gap-free");
    finishRecording(m.played);
    status(state.failed ? "error (played what had arrived)" : "done");
    publish();
  }
  kick();
}

// -- figures

const FIGURE_IDS = ["request", "ttfa", "server-ttfa", "rtf", "audio", "underruns", "drafter-used", "acceptance", "mal"];

function resetFigures(mark) {
  for (const id of FIGURE_IDS) show(id, mark);
  $("acceptance-row").hidden = true;
  $("mal-row").hidden = true;
  $("figures-note").hidden = true;
}

function cell(id, main, why) {
  const td = $(id);
  td.textContent = main;
  if (why) {
    const span = document.createElement("span");
    span.className = "why";
    span.textContent = ` — ${why}`;
    td.append(span);
  }
}

function showRequest(r) {
  const parts = [r.voice, `${r.sample_rate} Hz`];
  if (r.speed !== undefined) parts.push(`speed ${Number(r.speed).toFixed(2)}×`);
  parts.push(r.seed === null || r.seed === undefined ? "random seed" : `seed ${r.seed}`);
  if (r.sampling) parts.push(`temperature ${r.sampling.temperature}`);
  cell("request", parts.join(" · "));
}

function showFigures(st) {
  if (state.ttfa !== null) cell("ttfa", `${state.ttfa} ms`, "from Speak to the first audio here");
  cell("server-ttfa", st.ttfa_ms === null ? "n/a" : `${st.ttfa_ms.toFixed(0)} ms`, "from the text to the first audio sent");
  cell("rtf", st.rtf === null ? "n/a" : st.rtf.toFixed(3),
       st.rtf === null ? "" : `compute ÷ audio: ${st.rtf < 1 ? "faster" : "slower"} than real time`);
  cell("audio", `${st.audio_s.toFixed(2)} s`,
       `${st.sentences} sentence${st.sentences === 1 ? "" : "s"}, ${st.frames} codec frames, ${st.steps} model steps`);
  const note = $("figures-note");
  if (!st.drafter || st.drafter === "none") {
    cell("drafter-used", "none", "every step was decoded by the model alone, so there is no acceptance to report");
    note.hidden = true;
    return;
  }
  const gamma = st.gamma === "auto" ? `γ auto (mean ${Number(st.gamma_mean).toFixed(2)})` : `γ ${st.gamma}`;
  cell("drafter-used", st.drafter, gamma);
  $("acceptance-label").textContent = `draft acceptance (${st.drafter})`;
  if (st.drafted > 0) {
    cell("acceptance", `${(100 * st.acceptance).toFixed(0)}%`,
         `${st.accepted} of ${st.drafted} drafted steps were accepted whole by the model`);
  } else {
    cell("acceptance", "no drafts", "the drafter proposed nothing (γ 0, or the controller judged drafting not worth it)");
  }
  cell("mal", st.mean_accepted_length.toFixed(2), "steps committed per model pass (1.00: no gain from drafting)");
  $("acceptance-row").hidden = false;
  $("mal-row").hidden = false;
  const lossless = !st.acceptance_rule || st.acceptance_rule === "exact";
  note.textContent = `The ${st.drafter} drafter guesses up to γ steps ahead; the model checks them all in one pass ` +
    `and keeps what it would have produced itself, so ${lossless ? "the audio is exactly what the model alone makes " +
    "(lossless): acceptance changes the speed, not the sound" : `guesses were accepted by the relaxed rule ` +
    `“${st.acceptance_rule}” (not lossless)`}.`;
  note.hidden = false;
}

// -- download

function setDownload(d) {
  const a = $("download");
  if (state.download) URL.revokeObjectURL(state.download.url);
  state.download = d;
  if (!d) {
    a.removeAttribute("href");
    a.setAttribute("aria-disabled", "true");
    a.textContent = "Download WAV";
    return;
  }
  a.href = d.url;
  a.download = d.name;
  a.setAttribute("aria-disabled", "false");
  a.textContent = `Download WAV · ${(d.samples / d.sampleRate).toFixed(2)} s`;
}

function finishRecording(played) {
  const rec = state.rec;
  if (!rec || !played) return;
  const samples = rec.samples(played);
  const blob = encodeWav(samples, rec.sampleRate);
  const seed = state.ready && state.ready.seed !== null && state.ready.seed !== undefined ? `-seed${state.ready.seed}` : "";
  const voice = (state.ready && state.ready.voice) || "voicespec";
  setDownload({ url: URL.createObjectURL(blob), bytes: blob.size, samples: samples.length, sampleRate: rec.sampleRate,
                name: `${voice}${seed}-${state.contextId}.wav` });
}

// -- the words

function renderWords(words) {
  const box = $("words");
  if (words === null) { // a new utterance
    box.replaceChildren();
    state.wordSpans = [];
    state.wordNow = -1;
    const v = voiceInfo();
    const why = state.protocol !== "1.1" ? `this server sends no word timestamps (protocol ${state.protocol})`
      : v && v.timestamps === false ? `voice ${v.name} cannot time its words (no duration predictor)` : null;
    if (why) {
      const hint = document.createElement("span");
      hint.className = "hint";
      hint.textContent = `${$("text").value} — ${why}`;
      box.append(hint);
    }
    return;
  }
  for (const w of words) {
    const span = document.createElement("span");
    span.className = "w";
    span.textContent = w.text;
    span.title = `${w.start_s.toFixed(2)}–${w.end_s.toFixed(2)} s`;
    box.append(span, " ");
    state.wordSpans.push(span);
  }
}

function highlightWords(t) {
  const spans = state.wordSpans || [];
  const now = wordAt(state.words, t);
  for (let i = 0; i < spans.length; i++) {
    const w = state.words[i];
    spans[i].classList.toggle("said", i !== now && w.end_s <= t);
    spans[i].classList.toggle("now", i === now);
  }
  state.wordNow = now;
}

// -- the waveform

// Samples played so far: the worklet's count, moved on by the audio clock since its last report.
function playPosition() {
  if (state.stoppedAt !== null) return state.stoppedAt;
  const m = state.level;
  let p = m.played || 0;
  const ctx = state.player && state.player.ctx;
  if (m.playing && ctx) p += Math.max(0, ctx.currentTime * state.player.sampleRate - m.frame);
  return Math.min(p, (m.played || 0) + (m.queued || 0));
}

let drawing = false;
function kick() { if (!drawing && typeof requestAnimationFrame !== "undefined") { drawing = true; requestAnimationFrame(frame); } }

function frame() {
  drawing = false;
  const pos = draw();
  if (state.rec && state.rec.length) highlightWords(pos / state.rec.sampleRate);
  if (state.busy) kick(); // keep the playhead moving while anything is playing
}

function draw() {
  const canvas = $("wave");
  const dpr = window.devicePixelRatio || 1;
  const W = Math.max(1, Math.round(canvas.clientWidth * dpr)), H = Math.max(1, Math.round(canvas.clientHeight * dpr));
  if (canvas.width !== W || canvas.height !== H) { canvas.width = W; canvas.height = H; }
  const g = canvas.getContext("2d");
  const css = getComputedStyle(document.documentElement);
  const color = (name) => css.getPropertyValue(name).trim();
  g.fillStyle = color("--wave-bg");
  g.fillRect(0, 0, W, H);
  const rec = state.rec;
  g.font = `${12 * dpr}px system-ui, sans-serif`;
  if (!rec || !rec.length) {
    g.fillStyle = "#8c96b0";
    g.fillText(state.busy ? "waiting for the first audio…" : "the waveform appears here as the audio arrives", 12 * dpr, H / 2);
    return 0;
  }
  const rate = rec.sampleRate;
  const span = state.done || state.cancelled ? rec.length : Math.max(rec.length, 2 * rate); // samples across the width
  const pos = playPosition();
  const axis = 16 * dpr, mid = (H - axis) / 2, amp = mid * 0.92;
  const px = (s) => (s / span) * W;
  // the word being spoken, as a band
  const now = wordAt(state.words, pos / rate);
  if (now >= 0) {
    const w = state.words[now];
    const x0 = px(w.start_s * rate), width = Math.max(1, px((w.end_s - w.start_s) * rate));
    g.fillStyle = "rgba(255, 255, 255, 0.08)";
    g.fillRect(x0, 0, width, H - axis);
    g.fillStyle = color("--word-now");
    g.fillRect(x0, 0, width, 3 * dpr);
  }
  // word starts, as ticks
  g.fillStyle = "rgba(255, 255, 255, 0.18)";
  for (const w of state.words) g.fillRect(Math.round(px(w.start_s * rate)), 0, 1, H - axis);
  // the waveform: min/max per column, played in the light colour
  const played = color("--wave-played"), ahead = color("--wave-ahead");
  const { block, mins, maxs } = rec;
  for (let x = 0; x < W; x++) {
    const s0 = (x * span) / W, s1 = ((x + 1) * span) / W;
    const b0 = Math.floor(s0 / block);
    if (b0 >= mins.length) break;
    const b1 = Math.min(mins.length, Math.max(b0 + 1, Math.ceil(s1 / block)));
    let lo = 0, hi = 0;
    for (let b = b0; b < b1; b++) { if (mins[b] < lo) lo = mins[b]; if (maxs[b] > hi) hi = maxs[b]; }
    g.fillStyle = s0 < pos ? played : ahead;
    const top = mid - Math.min(1, hi) * amp, bottom = mid - Math.max(-1, lo) * amp;
    g.fillRect(x, top, 1, Math.max(dpr, bottom - top));
  }
  // the time axis
  g.fillStyle = "#8c96b0";
  const seconds = span / rate, step = seconds > 12 ? 2 : seconds > 5 ? 1 : 0.5;
  for (let t = 0; t <= seconds + 1e-9; t += step) {
    const x = Math.round(px(t * rate));
    g.fillRect(x, H - axis, 1, 4 * dpr);
    if (x < W - 30 * dpr) g.fillText(`${t.toFixed(step < 1 ? 1 : 0)} s`, x + 3 * dpr, H - 3 * dpr);
  }
  // the playhead
  if (pos > 0) {
    const x = Math.round(px(pos));
    g.fillStyle = "#ffffff";
    g.fillRect(x - Math.floor(dpr / 2), 0, Math.max(1, Math.round(1.5 * dpr)), H - axis);
  }
  return pos;
}

// -- wiring

if (typeof document !== "undefined" && $("speak")) {
  $("speak").addEventListener("click", speak);
  $("stop").addEventListener("click", stop);
  $("text").addEventListener("keydown", (e) => { if (e.key === "Enter" && (e.ctrlKey || e.metaKey)) speak(); });
  $("voice").addEventListener("change", () => { state.drafterChosen = false; fillVoiceControls(); });
  $("drafter").addEventListener("change", () => { state.drafterChosen = true; });
  $("speed").addEventListener("input", showSpeed);
  $("key").addEventListener("change", () => loadVoices().catch(() => {}));
  window.addEventListener("resize", kick);
  const params = new URLSearchParams(location.search);
  for (const name of ["text", "rate", "key", "prebuffer", "seed", "temperature", "gamma", "speed", "budget"]) {
    if (params.get(name) !== null) $(name).value = params.get(name);
  }
  showSpeed();
  publish();
  kick();
  loadVoices().then(() => {
    for (const name of ["voice", "drafter"]) { // a value the list lacks is kept, for the server to judge
      const want = params.get(name);
      if (want === null) continue;
      if (![...$(name).options].some((o) => o.value === want)) $(name).append(new Option(want, want));
      $(name).value = want;
      if (name === "voice") fillVoiceControls();
      else state.drafterChosen = true;
    }
    if (params.get("speed") !== null && !$("speed").disabled) { $("speed").value = params.get("speed"); showSpeed(); }
    if (params.get("autoplay")) speak();
  }, () => { if (params.get("autoplay")) speak(); });
}
