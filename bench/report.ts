import fs from 'node:fs/promises';
import path from 'node:path';

/** Replaces the section of BENCHMARKS.md that starts with `heading` (or appends it), and prints it. */
export async function writeSection(heading: string, report: string): Promise<void> {
  const file = path.resolve('BENCHMARKS.md');
  const existing = await fs
    .readFile(file, 'utf8')
    .catch(() => '# Benchmarks\n\nFigures are written by the make targets named in each section; rerun to refresh.\n\n');
  const start = existing.indexOf(heading);
  const next = start >= 0 ? existing.indexOf('\n## ', start + heading.length) : -1;
  const section = `${report.trimEnd()}\n`;
  await fs.writeFile(
    file,
    start < 0
      ? `${existing.trimEnd()}\n\n${section}`
      : existing.slice(0, start) + section + (next >= 0 ? `\n${existing.slice(next + 1)}` : ''),
  );
  console.log(report);
}
