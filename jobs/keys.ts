// make key PLAN=paid LABEL=me | make keys | make revoke KEY_ID=key_...
// The key is printed once, alone on the last line; only its hash is stored.
import { loadConfig } from '../src/config.js';
import { KeyStore, PLANS, type Plan } from '../src/edge/keys.js';

const [command, ...args] = process.argv.slice(2);
const store = KeyStore.open(loadConfig());
const usage = () => {
  console.error('usage: keys issue <free|paid> [label] | keys list | keys revoke <key_id>');
  process.exit(2);
};
if (command === 'issue') {
  const plan = args[0] as Plan;
  if (!PLANS.includes(plan)) usage();
  const { key, record } = await store.issue(plan, args[1] ?? '');
  console.log(`issued ${record.key_id} (${record.plan}${record.label ? `, ${record.label}` : ''}); it is shown once:`);
  console.log(key);
} else if (command === 'list') {
  for (const r of await store.list())
    console.log(`${r.key_id}\t${r.plan}\t${r.revoked_at ? `revoked ${r.revoked_at}` : 'active'}\t${r.created_at}\t${r.label}`);
} else if (command === 'revoke') {
  if (!args[0]) usage();
  const done = await store.revoke(args[0]);
  console.log(done ? `revoked ${args[0]}` : `no active key ${args[0]}`);
  process.exit(done ? 0 : 1);
} else usage();
