// AudioWorklet processor: plays queued PCM chunks gap-free on the audio thread.
//
// The main thread posts Float32Array chunks (at the AudioContext's rate, so no resampling here).
// Playback starts once `prebuffer` samples are queued (or the stream has ended); if the queue then
// runs dry before the end, that is an underrun: silence is played until audio arrives again.
// Every ~50 ms the processor reports the level (RMS, peak), samples played and underruns, and the
// audio clock (`frame`: currentFrame at the end of the last block) so the page can move a playhead
// smoothly between reports (played + frames since, while playing).

class PcmPlayer extends AudioWorkletProcessor {
  constructor(options) {
    super();
    this.prebuffer = (options.processorOptions && options.processorOptions.prebuffer) || 0;
    this.gen = 0; // echoed in reports, so the page can drop those made before its last reset
    this.reset();
    this.port.onmessage = (e) => {
      const m = e.data;
      if (m instanceof Float32Array) {
        this.queue.push(m);
        this.queued += m.length;
      } else if (m.type === "end") {
        this.ended = true;
      } else if (m.type === "reset") {
        this.reset();
        this.gen = m.gen || 0;
      }
    };
  }

  reset() {
    this.queue = [];
    this.offset = 0; // read position in queue[0]
    this.queued = 0; // samples waiting
    this.started = false;
    this.ended = false;
    this.starved = false;
    this.drained = false;
    this.played = 0;
    this.underruns = 0;
    this.underrunSamples = 0;
    this.sumSq = 0;
    this.peak = 0;
    this.blocks = 0;
  }

  process(inputs, outputs) {
    const out = outputs[0][0];
    out.fill(0);
    if (!this.started && (this.queued >= this.prebuffer || (this.ended && this.queued > 0))) this.started = true;
    let i = 0;
    if (this.started) {
      while (i < out.length && this.queue.length) {
        const chunk = this.queue[0];
        const n = Math.min(out.length - i, chunk.length - this.offset);
        out.set(chunk.subarray(this.offset, this.offset + n), i);
        i += n;
        this.offset += n;
        this.queued -= n;
        if (this.offset === chunk.length) {
          this.queue.shift();
          this.offset = 0;
        }
      }
      this.played += i;
      if (i < out.length && !this.ended) {
        if (!this.starved) this.underruns += 1; // one underrun per dry spell
        this.starved = true;
        this.underrunSamples += out.length - i;
      } else if (i > 0) {
        this.starved = false;
      }
    }
    for (let k = 0; k < i; k++) {
      this.sumSq += out[k] * out[k];
      this.peak = Math.max(this.peak, Math.abs(out[k]));
    }
    this.blocks += 1;
    const finished = this.ended && this.queued === 0 && this.started && !this.drained;
    if (this.blocks * out.length >= sampleRate / 20 || finished) {
      this.port.postMessage({
        type: "level", gen: this.gen, rms: Math.sqrt(this.sumSq / (this.blocks * out.length)), peak: this.peak,
        played: this.played, queued: this.queued, underruns: this.underruns,
        underrunMs: (1000 * this.underrunSamples) / sampleRate, drained: finished,
        frame: currentFrame + out.length, playing: this.started && !this.starved && !finished && this.queued > 0,
      });
      if (finished) this.drained = true;
      this.sumSq = 0;
      this.peak = 0;
      this.blocks = 0;
    }
    return true;
  }
}

registerProcessor("pcm-player", PcmPlayer);
