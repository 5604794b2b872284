"""Speech: synthesis (``POST /v1/audio/speech``), voices, transcription and translation,
served by placed ``TextToSpeech``/``SpeechToText`` models on speech runners."""
