/**
 * The JupyterLab side of `notify.ts`: its settings, JupyterLab's Notification API, the
 * browser's desktop notifications, and opening a notebook.
 */
import { JupyterFrontEnd } from '@jupyterlab/application';
import { Notification } from '@jupyterlab/apputils';
import { ISettingRegistry } from '@jupyterlab/settingregistry';

import { TaskModel } from './model';
import {
  DEFAULT_NOTIFY_SETTINGS,
  EndWatcher,
  IAnnounceTarget,
  INotifySettings,
  announce,
  readSettings
} from './notify';

function desktopApi(): typeof window.Notification | null {
  return typeof window !== 'undefined' && 'Notification' in window ? window.Notification : null;
}

export function labTarget(app: JupyterFrontEnd): IAnnounceTarget {
  return {
    notify: (message, kind, open) => {
      const actions = open
        ? [{ label: 'Open notebook', caption: 'Open the notebook this ran in', callback: open }]
        : [];
      Notification.emit(message, kind, { autoClose: false, actions });
    },
    openNotebook: path => {
      void app.commands.execute('docmanager:open', { path });
    },
    hidden: () => document.visibilityState === 'hidden',
    desktop: (title, body) => {
      const api = desktopApi();
      if (api && api.permission === 'granted') {
        new api(title, { body });
      }
    }
  };
}

/** Announce ends of long work while the page is open. */
export function watchEnds(
  app: JupyterFrontEnd,
  model: TaskModel,
  registry: ISettingRegistry | null,
  pluginId: string
): void {
  let settings: INotifySettings = { ...DEFAULT_NOTIFY_SETTINGS };
  const watcher = new EndWatcher();
  const target = labTarget(app);
  const apply = (s: ISettingRegistry.ISettings) => {
    settings = readSettings(s.composite as Record<string, unknown>);
    const api = desktopApi();
    if (settings.desktopNotifications && api && api.permission === 'default') {
      void api.requestPermission();
    }
    document.body.dataset.chongmingNotifyAfter = String(settings.notifyAfterSeconds);
  };
  if (registry) {
    registry
      .load(pluginId)
      .then(s => {
        apply(s);
        s.changed.connect(apply);
      })
      .catch(reason => console.warn('chongming-nb: settings not loaded', reason));
  }
  model.changed.connect(() => {
    for (const end of watcher.update(model.tasks, settings)) {
      announce(end, settings, target);
    }
  });
}
