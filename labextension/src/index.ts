/**
 * chongming-nb: the Tasks sidebar, the status bar item and the palette commands.
 * Everything talks to the server extension's REST API (`/chongming/api/`); no code
 * ever runs in a kernel on the extension's behalf.
 */
import {
  ILayoutRestorer,
  JupyterFrontEnd,
  JupyterFrontEndPlugin
} from '@jupyterlab/application';
import { ICommandPalette, MainAreaWidget, Notification, WidgetTracker } from '@jupyterlab/apputils';
import { INotebookTracker, NotebookPanel } from '@jupyterlab/notebook';
import { IRenderMimeRegistry } from '@jupyterlab/rendermime';
import { ISettingRegistry } from '@jupyterlab/settingregistry';
import { IStatusBar } from '@jupyterlab/statusbar';
import { LabIcon } from '@jupyterlab/ui-components';
import { Signal } from '@lumino/signaling';

import { TasksClient } from './api';
import { ControlVerb } from './contract';
import { TaskModel } from './model';
import { useLabLayoutWorker } from './lab-worker';
import { watchEnds } from './notify-lab';
import { NotebookLookup, SNAPSHOT_RANK, snapshotFactory } from './snapshot';
import { TIMELINE_MIME } from './timeline';
import { TIMELINE_RANK, timelineFactory } from './timeline-mime';
import { SNAPSHOT_MIME } from './contract';
import { KERNEL_KEY_PREFIX } from './render';
import { RunGraphPanel } from './run-graph';
import { TasksPanel } from './sidebar';
import { PicturesClient, TaskPictures } from './sidebar-detail';
import { TaskStatusItem } from './statusbar';

export const PLUGIN_ID = 'chongming-nb:plugin';

export namespace CommandIDs {
  export const open = 'chongming:open-tasks';
  export const refresh = 'chongming:refresh-tasks';
  export const pauseKernel = 'chongming:pause-kernel-tasks';
  export const resumeKernel = 'chongming:resume-kernel-tasks';
  export const stopKernel = 'chongming:stop-kernel-tasks';
  /** Args `runId` (and `taskId`: the node to select); the tab restorer reopens by it. */
  export const openRunGraph = 'chongming:open-run-graph';
}

/** The tab id of a run's graph. */
export function runGraphId(runId: string): string {
  return `chongming-run-graph-${runId.replace(/[^A-Za-z0-9_-]/g, '_')}`;
}

// the Tasks icon: two progress bars, one part-filled, beside a pause sign (not the list
// lines of the Table of Contents)
const ICON_SVG =
  '<svg xmlns="http://www.w3.org/2000/svg" width="16" height="16" viewBox="0 0 24 24">' +
  '<g class="jp-icon3" fill="#616161">' +
  '<path d="M2 5.5A1.5 1.5 0 0 1 3.5 4h11A1.5 1.5 0 0 1 16 5.5v3A1.5 1.5 0 0 1 14.5 10h-11A1.5 1.5 0 0 1 2 8.5zm2 .5v2h6V6z"/>' +
  '<path d="M2 15.5A1.5 1.5 0 0 1 3.5 14h11a1.5 1.5 0 0 1 1.5 1.5v3a1.5 1.5 0 0 1-1.5 1.5h-11A1.5 1.5 0 0 1 2 18.5zm2 .5v2h10v-2z"/>' +
  '<path d="M18 4h1.6v6H18zm2.4 0H22v6h-1.6z"/>' +
  '</g></svg>';

export const tasksIcon = new LabIcon({ name: 'chongming-nb:tasks', svgstr: ICON_SVG });

const plugin: JupyterFrontEndPlugin<void> = {
  id: PLUGIN_ID,
  description: 'Tasks sidebar and status bar for chongming_nb task controllers.',
  autoStart: true,
  optional: [
    ILayoutRestorer,
    ICommandPalette,
    IStatusBar,
    INotebookTracker,
    ISettingRegistry,
    IRenderMimeRegistry
  ],
  activate: (
    app: JupyterFrontEnd,
    restorer: ILayoutRestorer | null,
    palette: ICommandPalette | null,
    statusBar: IStatusBar | null,
    notebooks: INotebookTracker | null,
    settings: ISettingRegistry | null,
    rendermime: IRenderMimeRegistry | null
  ) => {
    useLabLayoutWorker(); // large run graphs are laid out off the main thread
    // saved task tables: the snapshot, or the live widget while its model lives
    const lookup: NotebookLookup = node => {
      const panel: NotebookPanel | null | undefined = notebooks?.find(p => p.node.contains(node));
      if (!panel) {
        return null;
      }
      return { rendermime: panel.content.rendermime, ready: panel.sessionContext.ready };
    };
    const factory = snapshotFactory(lookup);
    if (rendermime) {
      rendermime.addFactory(factory, SNAPSHOT_RANK);
      rendermime.addFactory(timelineFactory, TIMELINE_RANK);
    }
    notebooks?.widgetAdded.connect((_, panel) => {
      if (!panel.content.rendermime.mimeTypes.includes(SNAPSHOT_MIME)) {
        panel.content.rendermime.addFactory(factory, SNAPSHOT_RANK);
      }
      if (!panel.content.rendermime.mimeTypes.includes(TIMELINE_MIME)) {
        panel.content.rendermime.addFactory(timelineFactory, TIMELINE_RANK);
      }
    });

    const client = new TasksClient();
    const model = new TaskModel({ client });
    const panel = new TasksPanel(model, client);
    panel.title.icon = tasksIcon;
    app.shell.add(panel, 'left', { rank: 600 });
    if (restorer) {
      restorer.add(panel, 'chongming-tasks');
    }

    // the details' small timeline of attempts, and a step's run graph in the main area:
    // its tabs are tracked, so a page reload reopens them by run id (read again from
    // the store; a run gone from it says so in its tab)
    const pictures = new PicturesClient();
    const graphs = new WidgetTracker<MainAreaWidget<RunGraphPanel>>({ namespace: 'chongming-run-graph' });
    const showTask = (taskId: string) => {
      panel.select(taskId);
      panel.list.scrollToTask(taskId);
      app.shell.activateById(panel.id);
    };
    app.commands.addCommand(CommandIDs.openRunGraph, {
      label: 'Open the graph of a pipeline run',
      execute: args => {
        const runId = typeof args.runId === 'string' ? args.runId : '';
        const taskId = typeof args.taskId === 'string' ? args.taskId : null;
        if (!runId) {
          throw new Error(`${CommandIDs.openRunGraph} needs a runId`);
        }
        let widget = graphs.find(w => w.content.runId === runId);
        if (!widget) {
          const content = new RunGraphPanel({
            runId,
            client: pictures,
            model,
            onSelect: showTask,
            onVerb: (id, verb) => void model.send(id, verb)
          });
          widget = new MainAreaWidget({ content });
          widget.id = runGraphId(runId);
          widget.title.icon = tasksIcon;
          widget.title.closable = true;
          void graphs.add(widget); // saved with the layout: a reload reopens it
          app.shell.add(widget, 'main');
          void content.load().then(() => {
            if (taskId !== null) {
              content.selectTask(taskId);
            }
          });
        } else if (taskId !== null) {
          widget.content.selectTask(taskId);
        }
        app.shell.activateById(widget.id);
        return widget;
      }
    });
    if (restorer) {
      void restorer.restore(graphs, {
        command: CommandIDs.openRunGraph,
        args: w => ({ runId: w.content.runId }),
        name: w => w.content.runId
      });
    }
    const openRunGraph = (runId: string, taskId: string | null) =>
      void app.commands.execute(CommandIDs.openRunGraph, { runId, ...(taskId !== null ? { taskId } : {}) });
    panel.detailExtra = new TaskPictures({ client: pictures, onOpenRun: openRunGraph });

    // kernel id -> notebook path from JupyterLab's own session manager
    const sessions = app.serviceManager.sessions;
    const syncSessions = () => {
      const map = new Map<string, string>();
      for (const s of sessions.running()) {
        if (s.kernel) {
          map.set(s.kernel.id, s.path);
        }
      }
      model.setSessions(map);
    };
    sessions.runningChanged.connect(syncSessions);
    syncSessions();

    const currentKernelId = (): string | null =>
      notebooks?.currentWidget?.sessionContext.session?.kernel?.id ?? null;

    app.commands.addCommand(CommandIDs.open, {
      label: 'Open Tasks panel',
      caption: 'Show every chongming_nb task of every kernel',
      icon: tasksIcon,
      execute: () => {
        app.shell.activateById(panel.id);
      }
    });
    app.commands.addCommand(CommandIDs.refresh, {
      label: 'Refresh Tasks panel',
      execute: () => model.refresh()
    });

    const sendAll = async (verb: ControlVerb, label: string) => {
      const kernelId = currentKernelId();
      if (!kernelId) {
        Notification.warning('No notebook with a running kernel is active.');
        return;
      }
      const sent = await model.sendToKernel(kernelId, verb);
      Notification.info(
        sent === 0 ? `No task of this kernel can be ${label} now.` : `Asked ${sent} task(s) to ${verb}.`,
        { autoClose: 4000 }
      );
    };
    app.commands.addCommand(CommandIDs.pauseKernel, {
      label: 'Pause all tasks of this kernel',
      isEnabled: () => currentKernelId() !== null,
      execute: () => sendAll('pause', 'paused')
    });
    app.commands.addCommand(CommandIDs.resumeKernel, {
      label: 'Resume all tasks of this kernel',
      isEnabled: () => currentKernelId() !== null,
      execute: () => sendAll('resume', 'resumed')
    });
    app.commands.addCommand(CommandIDs.stopKernel, {
      label: 'Stop all tasks of this kernel',
      isEnabled: () => currentKernelId() !== null,
      execute: () => sendAll('stop', 'stopped')
    });
    if (palette) {
      const category = 'Tasks';
      for (const command of Object.values(CommandIDs)) {
        if (command === CommandIDs.openRunGraph) {
          continue; // opened from a step's "run graph" link (it needs a run id)
        }
        palette.addItem({ command, category });
      }
    }

    if (statusBar) {
      const item = new TaskStatusItem(model, () => {
        const kernelId = item.kernelId;
        const row = model.tasks.find(t => t.kernel_id === kernelId);
        const path = row?.notebook ?? (kernelId ? model.sessions.get(kernelId) : undefined);
        panel.setNotebookFilter(path ?? (kernelId ? `${KERNEL_KEY_PREFIX}${kernelId}` : null));
        app.shell.activateById(panel.id);
      });
      const activeChanged = new Signal<TaskStatusItem, void>(item);
      const follow = () => {
        item.kernelId = currentKernelId();
        activeChanged.emit();
      };
      if (notebooks) {
        notebooks.currentChanged.connect(follow);
        // a kernel restart or change keeps the widget but changes the kernel id
        notebooks.widgetAdded.connect((_, nb) => {
          nb.sessionContext.kernelChanged.connect(follow);
        });
      }
      follow();
      statusBar.registerStatusItem('chongming-nb:status', {
        item,
        align: 'left',
        rank: 5,
        isActive: () => item.kernelId !== null,
        activeStateChanged: activeChanged
      });
    }

    watchEnds(app, model, settings, PLUGIN_ID);

    void model.run();
    // mark the document for tests and tools: the extension is up
    document.body.dataset.chongmingTasks = 'ready';
  }
};

export default plugin;
