// A progress bar with rate and ETA on a terminal; silence otherwise (callers log one summary).

/** What a long job reports its progress to. */
export interface Progress {
  update(done: number, total: number, markets: number): void;
  finish(): void;
}

export function terminalProgress(label: string, stream: NodeJS.WriteStream = process.stderr): Progress | undefined {
  if (!stream.isTTY) return undefined;
  const started = Date.now();
  return {
    update(done, total, items) {
      const seconds = (Date.now() - started) / 1000;
      const share = total === 0 ? 1 : done / total;
      const width = 30;
      const bar = '#'.repeat(Math.round(share * width)).padEnd(width, '.');
      const rate = seconds > 0 ? items / seconds : 0;
      const eta = share > 0 ? Math.max(0, seconds / share - seconds) : NaN;
      stream.write(
        `\r${label} [${bar}] ${(share * 100).toFixed(0).padStart(3)}% ${done}/${total} days, ${items} markets, ${rate.toFixed(1)}/s, ETA ${Number.isFinite(eta) ? `${Math.ceil(eta)}s` : '?'}   `,
      );
    },
    finish() {
      stream.write('\n');
    },
  };
}
