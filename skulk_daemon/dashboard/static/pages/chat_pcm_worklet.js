// AudioWorklet processor for the Chat page's realtime microphone: hands each block of
// mono samples (the first input channel) to the page, which resamples and frames them.
class PcmCapture extends AudioWorkletProcessor {
  process(inputs) {
    const channel = inputs[0] && inputs[0][0];
    if (channel && channel.length) this.port.postMessage(channel.slice(0));
    return true;
  }
}
registerProcessor("skulk-pcm-capture", PcmCapture);
