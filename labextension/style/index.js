import './row.css';
import './base.css';
