// A LangGraph checkpointer that survives its process: LangGraph's own
// MemorySaver, its storage written to a file (temp file, fsync, rename)
// after every put, and read back when a new process opens it. The tests
// and the example use it to resume a thread in another process, as a
// database checkpointer would.

import fs from 'node:fs';
import { MemorySaver } from '@langchain/langgraph';

const enc = (v) => JSON.stringify(v, (_k, x) => (x instanceof Uint8Array ? { $b64: Buffer.from(x).toString('base64') } : x));
const dec = (s) => JSON.parse(s, (_k, x) => (x && typeof x === 'object' && typeof x.$b64 === 'string' ? new Uint8Array(Buffer.from(x.$b64, 'base64')) : x));

export class FileSaver extends MemorySaver {
  constructor(file) {
    super();
    this.file = file;
    if (fs.existsSync(file)) Object.assign(this, dec(fs.readFileSync(file, 'utf8')));
  }

  _persist() {
    const tmp = `${this.file}.${process.pid}.tmp`;
    const fd = fs.openSync(tmp, 'w', 0o600);
    fs.writeSync(fd, enc({ storage: this.storage, writes: this.writes }));
    fs.fsyncSync(fd);
    fs.closeSync(fd);
    fs.renameSync(tmp, this.file);
  }

  async put(...args) {
    const r = await super.put(...args);
    this._persist();
    return r;
  }

  async putWrites(...args) {
    await super.putWrites(...args);
    this._persist();
  }
}
