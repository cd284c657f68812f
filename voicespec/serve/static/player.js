// Browser client for `voicespec serve` (protocol v1, see PROTOCOL.md): a WebSocket session, an
// AudioWorklet player (worklet.js) and the page's controls. Exposes window.voicespec for tests.

const HEADER_BYTES = 12;

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

export class Player {
  constructor(sampleRate, prebufferMs, onLevel) {
    this.sampleRate = sampleRate;
    this.prebuffer = Math.round((prebufferMs / 1000) * sampleRate);
    this.onLevel = onLevel;
  }

  async init() {
    this.ctx = new AudioContext({ sampleRate: this.sampleRate, latencyHint: "interactive" });
    await this.ctx.audioWorklet.addModule(new URL("worklet.js", import.meta.url));
    this.node = new AudioWorkletNode(this.ctx, "pcm-player", {
      numberOfInputs: 0, outputChannelCount: [1], processorOptions: { prebuffer: this.prebuffer },
    });
    this.node.port.onmessage = (e) => this.onLevel(e.data);
    this.node.connect(this.ctx.destination);
    await this.ctx.resume();
  }

  push(samples) { this.node.port.postMessage(samples, [samples.buffer]); }
  end() { this.node.port.postMessage({ type: "end" }); }
  reset() { this.node.port.postMessage({ type: "reset" }); }
  async close() { if (this.ctx) await this.ctx.close(); }
}

export class Session {
  // Opens the socket and sends `start`; `handlers` get audio, done, cancelled, error messages.
  constructor(url, options, handlers) {
    this.url = url;
    this.options = options;
    this.handlers = handlers;
    this.nextSeq = {};
  }

  open() {
    return new Promise((resolve, reject) => {
      const ws = (this.ws = new WebSocket(this.url));
      ws.binaryType = "arraybuffer";
      ws.onopen = () => ws.send(JSON.stringify({ type: "start", ...this.options }));
      ws.onclose = (e) => { reject(new Error(`connection closed (${e.code} ${e.reason})`)); this.handlers.close(e); };
      ws.onmessage = (e) => {
        if (typeof e.data !== "string") return this.audio(decodeFrame(e.data, this.ready.encoding));
        const m = JSON.parse(e.data);
        if (m.type === "ready") { this.ready = m; resolve(m); }
        else if (m.type === "audio") {
          this.audio(decodeFrame(this.frameFromJson(m), this.ready.encoding));
        } else if (m.type === "error" && !this.ready) reject(new Error(`${m.code}: ${m.message}`));
        else (this.handlers[m.type] || (() => {}))(m);
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
    if (frame.seq !== want) this.handlers.error({ code: "client", message: `audio seq ${frame.seq}, expected ${want}` });
    this.nextSeq[frame.contextId] = frame.seq + 1;
    this.handlers.audio(frame);
  }

  send(type, fields) { this.ws.send(JSON.stringify({ type, ...fields })); }
  close() { if (this.ws) this.ws.close(); }
}

// ---------------------------------------------------------------------------- the page

const $ = (id) => document.getElementById(id);
const state = { session: null, player: null, contextId: null, n: 0, t0: 0, ttfa: null, samples: 0, done: null,
                level: {}, errors: [] };
window.voicespec = state;

function show(id, text) { $(id).textContent = text; }
function log(text) { $("log").textContent = `${new Date().toLocaleTimeString()} ${text}\n` + $("log").textContent; }

function publish() { // machine-readable outcome (headless tests read #result)
  $("result").textContent = JSON.stringify({
    ttfa_ms: state.ttfa, samples: state.samples, done: state.done, played: state.level.played || 0,
    underruns: state.level.underruns || 0, drained: !!state.drained, errors: state.errors,
  });
}

async function connect() {
  const params = new URLSearchParams(location.search);
  const rate = parseInt($("rate").value, 10);
  const key = $("key").value.trim();
  const proto = location.protocol === "https:" ? "wss:" : "ws:";
  const url = `${proto}//${location.host}/v1/stream` + (key ? `?api_key=${encodeURIComponent(key)}` : "");
  const options = { sample_rate: rate, encoding: "pcm_s16le" };
  const budget = parseFloat($("budget").value);
  if (budget > 0) options.latency_budget_ms = budget;
  if (params.get("seed")) options.seed = parseInt(params.get("seed"), 10);
  state.player = new Player(rate, parseFloat($("prebuffer").value) || 0, onLevel);
  await state.player.init();
  state.session = new Session(url, options, {
    audio: (f) => {
      if (f.contextId !== state.contextId) return;
      if (state.ttfa === null) { state.ttfa = Math.round(performance.now() - state.t0); show("ttfa", `${state.ttfa} ms`); }
      state.samples += f.samples.length;
      state.player.push(f.samples);
    },
    done: (m) => {
      if (m.context_id !== state.contextId) return;
      state.done = m.stats;
      state.player.end();
      show("acceptance", m.stats.acceptance.toFixed(2));
      show("mal", m.stats.mean_accepted_length.toFixed(2));
      show("rtf", m.stats.rtf === null ? "n/a" : m.stats.rtf.toFixed(3));
      show("server-ttfa", `${m.stats.ttfa_ms} ms`);
      log(`done: ${m.stats.audio_s.toFixed(2)} s of audio, ${m.stats.steps} steps, gamma ${m.stats.gamma}`);
      publish();
    },
    cancelled: (m) => log(`cancelled ${m.context_id}`),
    flushed: () => {},
    error: (m) => { state.errors.push(m); log(`error ${m.code}: ${m.message}`); publish(); },
    close: (e) => { log(`connection closed (${e.code})`); state.session = null; },
  });
  const ready = await state.session.open();
  log(`ready: voice ${ready.voice}, ${ready.sample_rate} Hz, drafter ${ready.drafter}, gamma ${ready.gamma}`);
}

function onLevel(m) {
  state.level = m;
  $("meter").value = Math.min(1, m.rms * 4);
  show("level", m.rms > 0 ? `${(20 * Math.log10(m.rms)).toFixed(1)} dBFS` : "silence");
  show("underruns", String(m.underruns));
  if (m.drained && !state.drained) {
    state.drained = true;
    if (state.session) state.session.send("stats", { context_id: state.contextId, underruns: m.underruns, underrun_ms: m.underrunMs });
    publish();
  }
}

async function speak() {
  try {
    if (!state.session || !state.player || state.player.sampleRate !== parseInt($("rate").value, 10)) {
      if (state.session) state.session.close();
      if (state.player) await state.player.close();
      await connect();
    }
    if (state.contextId) state.session.send("cancel", { context_id: state.contextId });
    state.player.reset();
    Object.assign(state, { contextId: `utt-${++state.n}`, t0: performance.now(), ttfa: null, samples: 0, done: null, drained: false });
    for (const id of ["ttfa", "server-ttfa", "acceptance", "mal", "rtf"]) show(id, "…");
    state.session.send("text", { context_id: state.contextId, text: $("text").value });
    state.session.send("end", { context_id: state.contextId });
  } catch (e) {
    state.errors.push({ code: "client", message: String(e) });
    log(String(e));
    publish();
  }
}

function stop() {
  if (state.session && state.contextId) state.session.send("cancel", { context_id: state.contextId });
  if (state.player) state.player.reset();
  state.contextId = null;
}

if (typeof document !== "undefined" && $("speak")) {
  $("speak").addEventListener("click", speak);
  $("stop").addEventListener("click", stop);
  const params = new URLSearchParams(location.search);
  if (params.get("text")) $("text").value = params.get("text");
  if (params.get("rate")) $("rate").value = params.get("rate");
  if (params.get("key")) $("key").value = params.get("key");
  if (params.get("prebuffer")) $("prebuffer").value = params.get("prebuffer");
  if (params.get("autoplay")) speak();
}
