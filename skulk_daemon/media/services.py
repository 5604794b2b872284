"""The node's two media job services, built once over one node, supervisor and
registry of cancellable commands."""

from __future__ import annotations

from dataclasses import dataclass

from skulk_daemon.chat.cancellation import ActiveCommands
from skulk_daemon.media.jobs_service import MediaJobs
from skulk_daemon.media.music_service import MusicFamily, MusicService
from skulk_daemon.media.store import JobStore
from skulk_daemon.media.video_service import VideoFamily, VideoService
from skulk_daemon.node.node import Node
from skulk_daemon.system import media_settings as settings
from skulk_daemon.worker.supervisor import Supervisor


@dataclass(frozen=True, slots=True)
class MediaServices:
    videos: VideoService
    music: MusicService

    @classmethod
    def build(cls, node: Node, worker: Supervisor, commands: ActiveCommands) -> MediaServices:
        data_dir = node.settings.data_dir
        video_store = JobStore(
            data_dir,
            "video",
            lambda: settings.store_cap(
                settings.VIDEO_STORE_MAX_BYTES_ENV, settings.DEFAULT_VIDEO_STORE_MAX_BYTES
            ),
        )
        music_store = JobStore(
            data_dir,
            "music",
            lambda: settings.store_cap(
                settings.MUSIC_STORE_MAX_BYTES_ENV, settings.DEFAULT_MUSIC_STORE_MAX_BYTES
            ),
        )
        return cls(
            videos=VideoService(MediaJobs(node, worker, commands, VideoFamily(), video_store)),
            music=MusicService(MediaJobs(node, worker, commands, MusicFamily(), music_store)),
        )

    async def start(self) -> None:
        await self.videos.jobs.start()
        await self.music.jobs.start()

    async def stop(self) -> None:
        await self.videos.jobs.stop()
        await self.music.jobs.stop()
