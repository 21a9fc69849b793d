import { Signal } from '@lumino/signaling';
import { describe, expect, it } from 'vitest';

import { watchKernel } from '../src/widget';

class FakeSession {
  status = 'idle';
  readonly statusChanged = new Signal<this, string>(this);
  set(status: string): void {
    this.status = status;
    this.statusChanged.emit(status);
  }
}

describe('watchKernel', () => {
  it('says once, with the reason, that the kernel restarted', () => {
    const session = new FakeSession();
    const said: string[] = [];
    watchKernel({ widget_manager: { context: { sessionContext: session } } }, r => said.push(r));
    session.set('busy');
    expect(said).toEqual([]);
    session.set('restarting');
    session.set('idle'); // the new kernel: this model is not in it
    session.set('dead');
    expect(said).toEqual(['restarted']);
  });

  it('follows a kernel connection when there is no session context, and unsubscribes', () => {
    const kernel = new FakeSession();
    const said: string[] = [];
    const stop = watchKernel({ widget_manager: { kernel } }, r => said.push(r));
    stop();
    kernel.set('autorestarting');
    expect(said).toEqual([]);
    watchKernel({ widget_manager: { kernel } }, r => said.push(r));
    expect(said).toEqual(['it died and was restarted']); // already gone when drawn
  });

  it('watches nothing outside JupyterLab', () => {
    expect(() => watchKernel({}, () => undefined)()).not.toThrow();
    expect(() => watchKernel(null, () => undefined)()).not.toThrow();
  });
});
